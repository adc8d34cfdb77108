/*
 * main.c - the nanovllm binary: dispatches to a subcommand.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static const char USAGE[] =
    "usage: nanovllm <command> [options]\n"
    "\n"
    "commands:\n"
    "  serve      the OpenAI-compatible HTTP server      (nanovllm serve --help)\n"
    "  generate   a completion of one prompt, offline    (nanovllm generate --help)\n"
    "  bench      throughput, latency and matmul timings (nanovllm bench --help)\n"
    "  tokenize   text or a chat request to token ids    (nanovllm tokenize --help)\n"
    "  health     exit 0 if a server's /health is 200    (nanovllm health --help)\n";

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "serve") == 0) return command_serve(argc - 1, argv + 1);
    if (strcmp(argv[1], "health") == 0) return command_health(argc - 1, argv + 1);
    if (strcmp(argv[1], "generate") == 0) return command_generate(argc - 1, argv + 1);
    if (strcmp(argv[1], "bench") == 0) return command_bench(argc - 1, argv + 1);
    if (strcmp(argv[1], "tokenize") == 0) return command_tokenize(argc - 1, argv + 1);
    fprintf(stderr, "nanovllm: unknown command '%s'\n%s", argv[1], USAGE);
    return 2;
}
