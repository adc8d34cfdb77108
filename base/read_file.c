/*
 * read_file.c - a whole small file into memory (see read_file.h).
 */
#include "read_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE_BYTES (1u << 30)

int read_file(const char *path, char **data, size_t *size, Error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return error_set(err, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return error_set(err, "%s is not a regular file", path);
    }
    if ((unsigned long long)st.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return error_set(err, "%s is larger than 1 GiB", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return error_set(err, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, n, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(buf);
        return error_set(err, "cannot read %s", path);
    }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return 0;
}
