/*
 * commands.h - the subcommands of the nanovllm binary (one file each).
 *
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status: 0 ok, 1 runtime failure,
 * 2 bad usage.
 */
#ifndef NANOVLLM_COMMANDS_H
#define NANOVLLM_COMMANDS_H

int command_generate(int argc, char **argv);
int command_bench(int argc, char **argv);
int command_serve(int argc, char **argv);
int command_health(int argc, char **argv);
int command_tokenize(int argc, char **argv);

#endif
