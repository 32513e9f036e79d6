/* main: the `fsdp` command. A table of commands, each a file in cmd/ (the only code that
 * parses argv or prints); the usage text is written from the same table. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cmd/commands.h"
#include "kernels/cpu/blas_core.h"

typedef struct Command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line; a second after '\n', indented under the first */
    const char *help;    /* how to get its help */
} Command;

static const Command commands[] = {
    {"train", cmd_train, "train a model with FSDP on a simulated cluster", "--help"},
    {"viz", cmd_viz, "step through one training step event by event", "--help"},
    {"ckpt", cmd_ckpt,
     "inspect a sharded checkpoint, or consolidate it into one safetensors file\n", "--help"},
    {"predict", cmd_predict,
     "classify a test image, or measure test accuracy, with trained weights\n", "--help"},
    {"sample", cmd_sample, "continue a prompt with a trained transformer's weights", "--help"},
    {"plan", cmd_plan,
     "memory, communication and step time of any model on any cluster, without\nthe cluster",
     "--help"},
    {"lessons", cmd_lessons,
     "exercises: write a piece of FSDP yourself, checked against the "
     "engine\n",
     "help"},
    {"launch", cmd_launch,
     "run a command once per GPU with torchrun's variables, and restart it\nwhen one fails",
     "--help"},
};
enum { NCOMMANDS = sizeof commands / sizeof *commands };

static void usage(FILE *f) {
    fputs("usage: ./fsdp <command> [flags]\n\ncommands\n", f);
    for (int i = 0; i < NCOMMANDS; i++) {
        const Command *c = &commands[i];
        fprintf(f, "  %-9s ", c->name);
        for (const char *s = c->summary; *s; s++) {
            fputc(*s, f);
            if (*s == '\n') fputs("            ", f);
        }
        fprintf(f, "%s(./fsdp %s %s)\n", c->summary[strlen(c->summary) - 1] == '\n' ? "" : " ",
                c->name, c->help);
    }
    fputs("  help      this text\n"
          "\n"
          "example: ./fsdp train --model toy --ranks 3 --strategy zero3 --steps 200\n",
          f);
}

/* What a command printed must have reached its stdout: a full disk (> /dev/full) or a closed
 * stdout (>&-) fails the run, not only the bytes (issue 39, case 10). Closing flushes and says
 * whether every write got there. */
static int stdout_written(int rc) {
    if (fclose(stdout) == 0) return rc;
    fprintf(stderr, "fsdp: could not write the output: %s\n", strerror(errno));
    return rc ? rc : 1;
}

static int run_command(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        usage(stdout);
        return 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, commands[i].name)) return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "fsdp: unknown command '%s' (see ./fsdp --help)\n", name);
    return 2;
}

int main(int argc, char **argv) {
    blas_core_reexec(argv); /* on a CPU newer than OpenBLAS knows, its fast kernels: blas_core.h */
    return stdout_written(run_command(argc, argv));
}
