/* plan_cmd: the command line of `fsdp plan`. It reads the model (a preset, a generic
 * transformer by shape or by parameter count), the cluster (a profile with overrides) and the
 * training knobs of `fsdp train`, runs the planner (sim/planner.c), and prints memory per GPU
 * at rest and at peak, each collective's traffic, the modelled step time, the largest batch
 * that fits, or one table across strategies (--compare); --json for tools. */
#ifndef FSDP_PLAN_CMD_H
#define FSDP_PLAN_CMD_H

/* argv[0] is the first flag after "plan". Returns the exit code: 0, 1 (a failed run) or 2
 * (bad input, one line on stderr). */
int plan_command(int argc, char **argv);

#endif
