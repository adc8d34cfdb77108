/*
 * read_file.h - a whole file into memory: the text files beside a model
 * (chat_template.jinja) and the ones named on the command line
 * (--chat-template). Large binaries are mapped instead (safetensors).
 */
#ifndef NANOVLLM_READ_FILE_H
#define NANOVLLM_READ_FILE_H

#include <stddef.h>

#include "error.h"

/* A regular file of at most 1 GiB: *data malloc'ed and NUL-terminated after
 * its *size bytes. Errors name the path. */
int read_file(const char *path, char **data, size_t *size, Error *err);

#endif
