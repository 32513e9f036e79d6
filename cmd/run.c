/* run: a training run as train and viz build it: the model, data and plan the flags describe,
 * the backend chosen, the checks made before anything runs, the ranks run (restarted from the
 * newest checkpoint when a rank fails) and the output files written whole. */
#include "cmd/run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/report.h"
#include "io/checkpoint.h"
#include "io/mnist.h"
#include "io/nvme_tier.h"
#include "io/text.h"
#include "io/trace_file.h"
#include "io/weights.h"
#include "models/kinds.h"
#include "models/toy.h"
#include "models/transformer.h"
#include "models/vit.h"
#include "runtime/backends.h"
#include "runtime/dist_env.h"
#include "sim/viz/memory_timeline.h"

/* The training split and the data it is evaluated on. Evaluating on data the model trained on
 * measures nothing, so training on the test split (the live workshop does, for speed) is
 * evaluated on the first 10,000 images of the train split instead. */
static int load_images(TrainRun *t, Err *err) {
    const char *dir = mnist_dir(t->args.data);
    int on_test = !strcmp(t->args.split, "test");
    int rc = mnist_load(&t->data, dir, t->args.split, err);
    if (!rc) rc = mnist_load(&t->eval, dir, on_test ? "train" : "test", err);
    if (rc) return rc;
    t->eval_loaded = t->eval.n;
    if (on_test && t->eval.n > 10000) t->eval.n = 10000;
    snprintf(t->eval_name, sizeof t->eval_name, "%s",
             on_test ? "the first 10000 images of the train split (held out: training uses the "
                       "test split)"
                     : "the test split");
    return 0;
}

/* The transformer the flags describe: a byte-level language model (vocabulary 256), GPT-2's
 * shape or Llama's, a preset's (gpt2-small, llama-125m) or by default 2 layers of 128 with 4
 * heads (Llama: K,V heads half the heads where they divide them, SwiGLU's MLP 3 x hidden), each
 * size a flag gives taking its place; flash attention unless --attention eager. */
static TransformerConfig transformer_config(const TrainArgs *a) {
    int llama = train_args_is_llama(a);
    TransformerConfig p = {.layers = 2, .hidden = 128, .heads = 4};
    int preset = !transformer_lm_preset(a->model, &p);
    TransformerConfig c = {.layers = a->layers ? a->layers : p.layers,
                           .hidden = a->hidden ? a->hidden : p.hidden,
                           .heads = a->heads ? a->heads : p.heads,
                           .seq = a->seq,
                           .vocab = TRANSFORMER_BYTE_VOCAB,
                           .arch = llama ? TRANSFORMER_LLAMA : TRANSFORMER_GPT,
                           .kv_heads = a->kv_heads ? a->kv_heads : p.kv_heads};
    c.mlp = a->mlp ? a->mlp : preset ? p.mlp : (llama ? 3 : 4) * c.hidden;
    if (llama && !c.kv_heads) c.kv_heads = c.heads % 2 == 0 ? c.heads / 2 : c.heads;
    c.attention =
        a->attention[0] ? (AttentionKind)attention_from_name(a->attention) : ATTENTION_FLASH;
    c.loss = a->loss[0] ? (LossKind)loss_from_name(a->loss) : LOSS_FUSED;
    c.elementwise = a->elementwise[0] ? (ElementwiseKind)elementwise_from_name(a->elementwise)
                                      : ELEMENTWISE_FUSED;
    return c;
}

/* The model the flags describe, without its data. */
static int create_model_desc(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    if (train_args_is_transformer(a)) {
        TransformerConfig c = transformer_config(a);
        return transformer_model_create(&t->model, &c, err);
    }
    if (!train_args_is_vit(a)) return toy_model_create(&t->model, err);
    VitConfig c;
    vit_preset_with(a->model, a->layers, a->heads, a->hidden, a->mlp, &c); /* a known preset */
    c.flash = !strcmp(a->attention, "flash"); /* eager unless asked: torchvision's fixtures */
    return vit_model_create(&t->model, &c, err);
}

static int create_model(TrainRun *t, Err *err) {
    int rc = create_model_desc(t, err);
    if (rc) return rc;
    if (train_args_is_transformer(&t->args))
        return text_load(&t->data, text_path(t->args.text), t->args.seq, &t->text, err);
    return train_args_is_vit(&t->args) ? load_images(t, err) : toy_dataset_create(&t->data, err);
}

/* The model and plan of a run, as a trace's replay needs them: no data, no parameters. */
int run_plan_only(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    int rc = create_model_desc(t, err);
    return rc ? rc : fsdp_plan_create(&t->plan, &t->model, &a->fsdp, a->ranks, err);
}

TrainJob run_job(TrainRun *t, JobScope scope) {
    const TrainArgs *a = &t->args;
    TrainJob job = {.model = &t->model,
                    .data = &t->data,
                    .plan = &t->plan,
                    .cfg = &a->fsdp,
                    .steps = a->steps,
                    .memory = t->memory,
                    .init_from = a->init_from,
                    .held_out = a->val_size}; /* the sampler's, so every scope's */
    /* --dump-params writes the parameters after the last step, viz's steps too */
    job.final_params = a->dump_params ? t->params : NULL;
    if (scope == JOB_STEPS_ONLY) return job;
    int vit = train_args_is_vit(a), big = vit || train_args_is_transformer(a);
    job.eval_data = vit && a->eval ? &t->eval : NULL;
    job.eval_every = a->eval_every;
    job.has_best = t->has_best;
    job.best_val_loss = t->best_val_loss;
    job.save_full = a->save_full;
    job.save_hf = a->save_hf;
    job.ckpt_dir = a->ckpt_dir;
    job.ckpt_every = a->ckpt_every;
    job.ckpt_keep = a->keep;
    job.resume_from = t->resume[0] ? t->resume : NULL;
    job.model_name = a->model;
    t->faults = (TrainFaults){a->fail_at_step, a->fail_at_rank, a->kill_in_save_step,
                              a->kill_in_prune_step};
    job.hooks = train_fault_hooks(&t->faults);
    job.rank_per_process = t->rank_per_process;
    /* gathering a ViT's or a transformer's parameters onto one rank is only worth it to dump
     * them */
    if (!big) job.final_params = t->params;
    return job;
}

/* Resolves --backend auto, and refuses a real backend that this build or this machine cannot
 * run. */
static int choose_backend(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    if (a->backend == BACKEND_SIM) return 0; /* no backend library is even loaded */
    char why[160];
    if (a->backend == BACKEND_MPI)
        return backend_available(REAL_MPI, why, sizeof why)
                   ? 0
                   : err_set(err, ERR_USAGE, "--backend mpi: %s", why);
    int gpu = backend_available(REAL_CUDA, why, sizeof why);
    if (a->backend == BACKEND_AUTO) {
        a->backend = gpu ? BACKEND_CUDA : BACKEND_SIM;
        snprintf(t->backend_note, sizeof t->backend_note, "backend: %s (auto: %s)",
                 gpu ? "cuda" : "sim", why);
    } else if (a->backend == BACKEND_CUDA && !gpu) {
        return err_set(err, ERR_USAGE, "--backend cuda: no GPU to run on (%s)", why);
    }
    return 0;
}

/* The job on every rank: simulated ranks, this machine's GPU, or this process's rank of an MPI
 * job. */
int run_ranks(const TrainRun *t, const ClusterOptions *opt, TrainJob *job, ClusterResult *res,
              Err *err) {
    if (t->args.backend == BACKEND_CUDA)
        return backend_run(REAL_CUDA, opt, train_rank, job, res, err);
    if (t->args.backend == BACKEND_MPI)
        return backend_run(REAL_MPI, opt, train_rank, job, res, err);
    return cluster_run(opt, train_rank, job, res, err);
}

/* --resume auto: the newest complete checkpoint in --checkpoint-dir (none yet: the start). */
static int resolve_resume(TrainRun *t, Err *err) {
    const char *r = t->args.resume;
    if (!r) return 0;
    if (strcmp(r, "auto") != 0) {
        snprintf(t->resume, sizeof t->resume, "%s", r);
        return 0;
    }
    return checkpoint_latest(t->args.ckpt_dir, t->resume, sizeof t->resume, err);
}

/* A resumed run holds out what the checkpoint's run held out: more would validate on images it
 * trained on, fewer would train on images it validated on, and either changes every epoch's
 * shuffle. */
static int held_out_matches(const TrainRun *t, const CkptMeta *m, Err *err) {
    const TrainArgs *a = &t->args;
    if (m->held_out == a->val_size) return 0;
    if (!m->held_out)
        return err_set(err, ERR_USAGE,
                       "%s was trained on every image of its split; --val-size %ld would validate "
                       "on images it trained on (resume it without --val-size, or start afresh)",
                       t->resume, a->val_size);
    if (a->val_size)
        return err_set(err, ERR_USAGE,
                       "%s was trained with the split's last %ld images held out: resume it with "
                       "--val-size %ld, not %ld",
                       t->resume, m->held_out, m->held_out, a->val_size);
    return err_set(err, ERR_USAGE,
                   "%s was trained with the split's last %ld images held out: resume it with "
                   "--val-size %ld, or it would train on them",
                   t->resume, m->held_out, m->held_out);
}

/* A resumed run follows the learning-rate curve of the run it resumes: the rate at every step
 * depends on the schedule and, for cosine and linear, on the run's length, so other flags (or
 * another --epochs) would jump to another curve mid-run. PyTorch's scheduler state_dict keeps
 * the same; here a mismatch is one line and exit 2 rather than a silent choice of either. */
static int lr_curve_matches(const TrainRun *t, const CkptMeta *m, Err *err) {
    const TrainArgs *a = &t->args;
    LrCurve run = {.schedule = a->fsdp.lr_schedule, .lr = a->fsdp.lr, .total_steps = a->steps};
    LrCurve saved = m->has_lr_curve ? m->lr_curve : (LrCurve){.lr = run.lr};
    if ((!m->has_lr_curve && !lr_schedule_varies(&run.schedule)) || lr_curve_same(&saved, &run))
        return 0;
    char was[256], asks[256];
    report_lr_curve_flags(was, sizeof was, &saved);
    report_lr_curve_flags(asks, sizeof asks, &run);
    return err_set(err, ERR_USAGE,
                   "%s was trained with %s%s; this run asks for %s: resume it with the same "
                   "schedule and length, or start afresh",
                   t->resume, m->has_lr_curve ? was : "a constant rate",
                   m->has_lr_curve ? "" : " (no schedule recorded)", asks);
}

/* The checkpoint a run resumes, read once before anything runs or is written (a run directory's
 * config.json is rewritten before the ranks load it): a damaged meta.json, or one whose held-out
 * samples or learning-rate curve are not this run's, is one line and exit 2, the directory as it
 * was. */
static int check_resumed_checkpoint(const TrainRun *t, Err *err) {
    if (!t->resume[0]) return 0;
    CkptMeta m;
    int rc = ckpt_meta_read(&m, t->resume, &model_kinds, &t->model, err);
    if (!rc) rc = held_out_matches(t, &m, err);
    if (!rc) rc = lr_curve_matches(t, &m, err);
    if (!rc && m.step > t->args.steps) /* it trained nothing and said nothing */
        rc = err_set(err, ERR_USAGE,
                     "--steps %ld, but %s is at step %ld: --steps counts every step of the run, "
                     "so give more than %ld to train on",
                     t->args.steps, t->resume, m.step, m.step);
    if (!rc && m.step == t->args.steps && !t->quiet_rank)
        fprintf(stderr,
                "fsdp: %s is at step %ld, the run's last (--steps): nothing left to train\n",
                t->resume, m.step);
    ckpt_meta_free(&m);
    return rc;
}

/* --val-size with --checkpoint-dir D: D/best, where the run keeps the state of its lowest
 * validation loss, must be fsdp's link or nothing (a save replaces it). A run that resumes
 * (--resume, or a restart after a failure) goes on from the loss D/best holds, measured on as
 * many held-out images; a run from the start makes its own best. */
static int read_best(TrainRun *t, Err *err) {
    const TrainArgs *a = &t->args;
    t->has_best = 0;
    if (!a->val_size || !a->ckpt_dir) return 0;
    char best[4096];
    int rc = checkpoint_best(a->ckpt_dir, best, sizeof best, err);
    if (rc || !best[0] || !t->resume[0]) return rc;
    CkptMeta m;
    if ((rc = ckpt_meta_read(&m, best, &model_kinds, &t->model, err))) return rc;
    if (!m.validated)
        rc = err_set(err, ERR_USAGE,
                     "%s records no validation loss (.val_loss): it is no best "
                     "checkpoint fsdp saved",
                     best);
    else if (m.held_out != a->val_size)
        rc = err_set(err, ERR_USAGE,
                     "%s was chosen on the split's last %ld images held out, this run holds out "
                     "%ld: give --val-size %ld, or another --checkpoint-dir",
                     best, m.held_out, a->val_size, m.held_out);
    t->has_best = !rc;
    t->best_val_loss = m.val_loss;
    ckpt_meta_free(&m);
    return rc;
}

/* --offload nvme: the directory must take every rank's file; tried before anything runs (one
 * file of the whole size, removed at once) so a bad directory is one line and exit 2. */
static int check_nvme_dir(const TrainRun *t, Err *err) {
    const FsdpConfig *c = &t->args.fsdp;
    if (c->offload != OFFLOAD_NVME) return 0;
    size_t bytes = 0;
    for (int r = 0; r < t->args.ranks; r++)
        bytes += plan_rest_bytes(&t->plan, r, OFFLOAD_NVME).nvme +
                 3 * (size_t)t->plan.nunits * NVME_TIER_ALIGN; /* each piece 4 KiB aligned */
    NvmeTier *probe;
    int rc = nvme_tier_open(&probe, c->nvme_dir, 0, bytes, err);
    nvme_tier_close(probe);
    return rc == ERR_IO ? ERR_USAGE : rc;
}

/* The folder a path's file goes in: "." for a bare name, "/" for "/x". */
static void folder_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    snprintf(dir, n, "%.*s", slash ? (int)(slash - path + (slash == path)) : 1, slash ? path : ".");
}

/* A file the run writes (most of them at its very end): a path that cannot take it is
 * refused before any training, not after it. */
static int check_output_file(const char *flag, const char *path, Err *err) {
    if (!path) return 0;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "%s %s is a directory; give a file", flag, path);
    char dir[4096];
    folder_of(path, dir, sizeof dir);
    if (access(dir, W_OK) != 0)
        return err_set(err, ERR_USAGE, "%s %s: cannot write in %s: %s", flag, path, dir,
                       strerror(errno));
    return 0;
}

/* --checkpoint-dir: made now, as the first save would make it (one level), so that a folder
 * that cannot be is refused before training rather than at the first save; an existing one
 * must be a writable folder. */
static int check_checkpoint_dir(const char *path, Err *err) {
    if (!path) return 0;
    struct stat sb;
    if (stat(path, &sb) != 0 && mkdir(path, 0777) != 0 && errno != EEXIST) /* ranks race */
        return err_set(err, ERR_USAGE, "--checkpoint-dir %s: cannot create it: %s", path,
                       strerror(errno));
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "--checkpoint-dir %s is not a directory", path);
    if (access(path, W_OK) != 0)
        return err_set(err, ERR_USAGE, "--checkpoint-dir %s: cannot write in it: %s", path,
                       strerror(errno));
    return 0;
}

/* --save-hf: a folder (made at the end if missing) in a folder that can be written. */
static int check_output_dir(const char *flag, const char *path, Err *err) {
    if (!path) return 0;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return err_set(err, ERR_USAGE, "%s %s is a file; give a folder", flag, path);
    char dir[4096];
    if (stat(path, &sb) == 0)
        snprintf(dir, sizeof dir, "%s", path);
    else
        folder_of(path, dir, sizeof dir);
    if (access(dir, W_OK) != 0)
        return err_set(err, ERR_USAGE, "%s %s: cannot write in %s: %s", flag, path, dir,
                       strerror(errno));
    return 0;
}

static int check_outputs(const TrainArgs *a, Err *err) {
    int rc = check_output_file("--save-full", a->save_full, err);
    if (!rc) rc = check_output_dir("--save-hf", a->save_hf, err);
    if (!rc) rc = check_output_file("--trace-out", a->trace_out, err);
    if (!rc) rc = check_output_file("--dump-params", a->dump_params, err);
    if (!rc) rc = check_output_file("--memory-svg", a->memory_svg, err);
    return rc ? rc : check_checkpoint_dir(a->ckpt_dir, err);
}

/* One job at a time in --run-dir and --checkpoint-dir (issue 39: two jobs resumed the same run,
 * one dying on the other's files): rank 0's process holds both folders' locks until it ends. A
 * fresh run does not take over a folder holding another run's checkpoints: those are continued
 * with --resume, or left alone. */
static int lock_folders(TrainRun *t, Err *err) {
    const TrainArgs *a = &t->args;
    if (t->quiet_rank) return 0;
    int rc = a->run_dir ? dir_lock(&t->run_lock, "--run-dir", a->run_dir, err) : 0;
    if (rc || !a->ckpt_dir) return rc; /* check_outputs made the folder */
    if ((rc = dir_lock(&t->ckpt_lock, "--checkpoint-dir", a->ckpt_dir, err))) return rc;
    char held[4096];
    if (!a->resume && (rc = checkpoint_latest(a->ckpt_dir, held, sizeof held, err))) return rc;
    if (!a->resume && held[0])
        return err_set(err, ERR_USAGE,
                       "--checkpoint-dir %s already holds checkpoints (%s): continue them with "
                       "--resume auto, or give another folder",
                       a->ckpt_dir, held);
    return 0;
}

int run_not_rank_0(void) {
    DistEnv env;
    Err err = {0};
    return dist_env_shape_from_process(&env, &err) == 0 && env.rank != 0;
}

/* Which launcher started this process, checked against the backend: mpi runs only under
 * mpirun or srun (MPI's own launchers), in a world of exactly --ranks processes. */
static int check_launcher(const TrainArgs *a, const DistEnv *env, Err *err) {
    int mpi = a->backend == BACKEND_MPI;
    if (mpi && env->launcher != LAUNCHER_OPENMPI && env->launcher != LAUNCHER_SLURM)
        return err_set(err, ERR_USAGE,
                       "--backend mpi runs one process per rank: start it with mpirun -np %d "
                       "(or srun)%s",
                       a->ranks,
                       env->launcher == LAUNCHER_NONE ? "" : ", not under torchrun's variables");
    if (a->ranks != env->world_size && (mpi || env->world_size > 1))
        return err_set(
            err, ERR_USAGE, "--ranks %d: this is rank %d of %d processes (%s); pass --ranks %d",
            a->ranks, env->rank, env->world_size, launcher_name(env->launcher), env->world_size);
    return 0;
}

/* Started as one of many processes (torchrun, fsdp launch, srun, mpirun) for a real backend:
 * this process runs one rank, --ranks must be the world, and only rank 0 prints and writes
 * files (the others' stdout goes nowhere; their errors still reach stderr). The simulator
 * makes its own ranks and ignores these variables. */
static int join_processes(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    DistEnv env;
    if (a->backend != BACKEND_CUDA && a->backend != BACKEND_MPI) return 0;
    /* MPI meets its ranks itself: only CUDA's rendezvous needs rank 0's address */
    int rc = a->backend == BACKEND_MPI ? dist_env_shape_from_process(&env, err)
                                       : dist_env_from_process(&env, err);
    t->quiet_rank = !rc && env.rank != 0;
    if (!rc) rc = check_launcher(a, &env, err);
    if (rc || env.world_size == 1) return rc;
    t->rank_per_process = 1;
    if (t->quiet_rank) { /* its flags stay: every rank must gather what rank 0 writes */
        if (!freopen("/dev/null", "w", stdout))
            return err_set(err, ERR_IO, "rank %d: cannot silence stdout", env.rank);
    }
    return 0;
}

/* --init-from checked whole before the run says anything: its header against the model and every
 * value finite (a nan found by a rank reading its rows came after the banner and the plan),
 * read through a small buffer so that no process holds the whole model; the ranks then read
 * their own rows. One line and exit 2 if bad. */
static int check_init_from(const ModelDesc *m, const char *path, Err *err) {
    enum { CHUNK = 1 << 18 }; /* floats read at a time */
    WeightsFile *w;
    int rc = weights_open(&w, m, path, err);
    if (rc) return rc;
    float *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) rc = err_set(err, ERR_NOMEM, "out of memory reading %s", path);
    for (int p = 0; !rc && p < m->nparams; p++)
        for (size_t at = 0; !rc && at < m->params[p].numel; at += CHUNK) {
            size_t n = m->params[p].numel - at < CHUNK ? m->params[p].numel - at : CHUNK;
            rc = weights_read(w, p, at, n, buf, err);
        }
    free(buf);
    weights_close(w);
    return rc;
}

int run_prepare(TrainRun *t, Err *err) {
    TrainArgs *a = &t->args;
    int brc = join_processes(t, err);
    if (!brc && a->backend == BACKEND_AUTO) {
        brc = choose_backend(t, err);
        if (!brc) brc = join_processes(t, err); /* auto may have chosen cuda */
    } else if (!brc) {
        brc = choose_backend(t, err);
    }
    if (brc) return brc;
    t->profile = profile_find(a->profile);
    if (!t->profile)
        return err_set(err, ERR_USAGE, "--profile must be one of %s (got '%s')", profile_names(),
                       a->profile);
    int rc = create_model(t, err);
    if (!rc) rc = fsdp_plan_create(&t->plan, &t->model, &a->fsdp, a->ranks, err);
    if (rc) return rc;
    long global = (long)a->ranks * a->fsdp.batch_size * a->fsdp.grad_accum;
    const char *what = train_args_is_transformer(a) ? "sequences" : "images";
    if (a->val_size >= t->data.n && train_args_is_transformer(a))
        return err_set(err, ERR_USAGE,
                       "--val-size %ld holds out the whole text (%ld sequences); it must be "
                       "below %ld",
                       a->val_size, t->data.n, t->data.n);
    if (a->val_size >= t->data.n)
        return err_set(err, ERR_USAGE,
                       "--val-size %ld holds out the whole %s split (%ld images); it must be "
                       "below %ld",
                       a->val_size, a->split, t->data.n, t->data.n);
    long trained = t->data.n - a->val_size; /* the samples the sampler draws from */
    if (global > trained && a->val_size)
        return err_set(err, ERR_USAGE,
                       "--batch-size %d x --ranks %d x --grad-accum %d = %ld samples a step, "
                       "more than the %ld %s --val-size %ld leaves to train on",
                       a->fsdp.batch_size, a->ranks, a->fsdp.grad_accum, global, trained, what,
                       a->val_size);
    if (global > trained)
        return err_set(err, ERR_USAGE,
                       "--batch-size %d x --ranks %d x --grad-accum %d = %ld samples a step, "
                       "more than the data set's %ld",
                       a->fsdp.batch_size, a->ranks, a->fsdp.grad_accum, global, t->data.n);
    if (a->epochs) a->steps = (long)a->epochs * (trained / global);
    if (a->steps > TRAIN_MAX_STEPS) /* a checkpoint of a longer run could not be resumed */
        return err_set(err, ERR_USAGE,
                       "--epochs %d is %ld steps (%ld samples, %ld a step); a run takes at most "
                       "%ld steps",
                       a->epochs, a->steps, trained, global, TRAIN_MAX_STEPS);
    if ((rc = train_args_check_lr_schedule(a, a->steps, err))) return rc; /* --epochs' steps */
    t->memory = calloc((size_t)a->ranks, sizeof *t->memory);
    t->params = calloc(t->model.total_numel + 1, sizeof(float));
    if (!t->memory || !t->params) return err_set(err, ERR_NOMEM, "out of memory");
    if (a->init_from && (rc = check_init_from(&t->model, a->init_from, err))) return rc;
    if ((rc = check_nvme_dir(t, err))) return rc;
    if ((rc = run_dir_prepare(a, !t->quiet_rank, err))) return rc; /* the outputs' folder */
    if ((rc = check_outputs(a, err))) return rc;
    if ((rc = lock_folders(t, err))) return rc;
    if ((rc = resolve_resume(t, err))) return rc;
    if ((rc = run_dir_check_resumable(a, t->resume, err))) return rc;
    if ((rc = check_resumed_checkpoint(t, err))) return rc;
    if ((rc = read_best(t, err))) return rc;
    if (t->quiet_rank) return 0;
    if ((rc = atomic_open(&t->dump, a->dump_params, err))) return rc;
    if ((rc = atomic_open(&t->svg, a->memory_svg, err))) return rc;
    if ((rc = atomic_open(&t->trace, a->trace_out, err))) return rc;
    char title[160];
    snprintf(title, sizeof title, "fsdp: %s, %s, %d ranks", a->model,
             strategy_name(a->fsdp.strategy), a->ranks);
    return run_dir_open(&t->run_dir, a, a->steps, title, err);
}

/* Flags that name files the run writes: a replay has no business with them. */
static int is_output_flag(const char *flag) {
    return !strcmp(flag, "--trace-out") || !strcmp(flag, "--dump-params") ||
           !strcmp(flag, "--memory-svg");
}

static int write_trace(const TrainRun *t, const Trace *trace, Err *err) {
    char *args[t->nflags + 1], *units[t->plan.nunits + 1];
    TraceMeta meta = {.args = args, .units = units, .nunits = t->plan.nunits};
    for (int i = 0; i < t->nflags; i++) {
        if (is_output_flag(t->flags[i]))
            i++; /* and its value */
        else
            args[meta.nargs++] = t->flags[i];
    }
    /* the writer only reads them */
    for (int u = 0; u < t->plan.nunits; u++) units[u] = (char *)t->plan.units[u].name;
    return trace_file_write(trace, &meta, t->trace.f, err);
}

/* Memory over the last step, from the trace: as an SVG picture into svg (NULL: none) and, with
 * text, as the terminal's timeline on stdout. */
int run_memory_timeline(const TrainRun *t, const Trace *trace, FILE *svg, int text, Err *err) {
    MemoryTimeline mt;
    int rc = memory_timeline_build(&mt, trace, -1, err);
    if (!rc && svg) {
        char title[160];
        snprintf(title, sizeof title, "fsdp memory: %s, %s, %d ranks", t->args.model,
                 strategy_name(t->args.fsdp.strategy), t->args.ranks);
        /* DDP: every parameter, its gradient and Adam's two moments, in fp32 */
        MemorySvgOptions o = {.title = title,
                              .ddp_bytes = 4 * t->model.total_numel * sizeof(float)};
        rc = memory_svg_write(&mt, &o, svg, err);
    }
    if (!rc && text) {
        printf("memory over the last step (each row scaled to the rank's peak):\n");
        rc = memory_text_write(&mt, 48, stdout, err);
    }
    memory_timeline_free(&mt);
    return rc;
}

int run_write_outputs(TrainRun *t, const ClusterResult *res, Err *err) {
    int rc = 0;
    if (t->dump.f) rc = report_dump_params(t->dump.f, t->dump.path, &t->model, t->params, err);
    if (!rc && t->trace.f) rc = write_trace(t, &res->trace, err);
    if (!rc && t->svg.f) rc = run_memory_timeline(t, &res->trace, t->svg.f, 0, err);
    if (!rc) rc = atomic_commit(&t->dump, err);
    if (!rc) rc = atomic_commit(&t->svg, err);
    if (!rc) rc = atomic_commit(&t->trace, err);
    return rc;
}

/* The simulated cluster a run asks for: its ranks, hsdp's replica groups, the cost profile,
 * and devices that hold nothing for an accounting-only run. */
ClusterOptions run_cluster_options(const TrainRun *t, int trace) {
    const TrainArgs *a = &t->args;
    return (ClusterOptions){.ranks = a->ranks,
                            .replicas = a->fsdp.strategy == STRAT_HSDP ? a->fsdp.replicas : 1,
                            .profile = t->profile,
                            .trace = trace,
                            .accounting_only = a->accounting_only,
                            .timeout = a->timeout,
                            .check_streams = a->check_streams,
                            .tf32 = a->tf32,
                            .unit_names = &t->plan};
}

/* Models this small (the toy) have their numbers recorded with the trace, for the viewer. */
enum { VALUES_MAX_NUMEL = 64 };

int run_values_alloc(const TrainRun *t, TrainJob *job, Err *err) {
    size_t n = t->model.total_numel;
    if (n > VALUES_MAX_NUMEL) return 0;
    job->step_params = calloc((size_t)(job->steps + 1) * n, sizeof(float));
    job->step_grads = calloc((size_t)job->steps * n + 1, sizeof(float));
    /* and every rank's own gradients before they were averaged, which the frames show while a
     * unit's gradients are unsharded */
    job->step_local_grads =
        calloc((size_t)job->steps * (size_t)t->plan.world * n + 1, sizeof(float));
    if (!job->step_params || !job->step_grads || !job->step_local_grads)
        return err_set(err, ERR_NOMEM, "out of memory for the values of %ld steps", job->steps);
    return 0;
}

/* Hands the recorded values to the trace, which frees them with its events. */
void run_values_to_trace(TrainJob *job, size_t numel, Trace *trace) {
    if (!job->step_params) return;
    trace->params = job->step_params;
    trace->grads = job->step_grads;
    trace->local_grads = job->step_local_grads;
    trace->steps = (int)job->steps;
    trace->numel = numel;
    job->step_params = job->step_grads = job->step_local_grads = NULL;
}

void run_values_free(TrainJob *job) {
    free(job->step_params);
    free(job->step_grads);
    free(job->step_local_grads);
    job->step_params = job->step_grads = job->step_local_grads = NULL;
}

/* Runs the job; when a rank fails and --max-restarts allows, starts again from the newest
 * complete checkpoint (or from the beginning when there is none yet), as torchrun and Ray do.
 * An injected failure (--fail-at) happens once: the restarted run goes past it. A run that
 * diverged (ERR_DIVERGED) is not restarted: the same steps from the same checkpoint would
 * diverge again. */
int run_with_restarts(TrainRun *t, const ClusterOptions *opt, TrainJob *job, ClusterResult *res,
                      Err *err) {
    int rc = run_ranks(t, opt, job, res, err);
    for (int restart = 1; rc && rc != ERR_DIVERGED && restart <= t->args.max_restarts; restart++) {
        cluster_result_free(res);
        fprintf(stderr, "fsdp: %s\n", err->msg);
        Err latest = {0};
        t->resume[0] = 0;
        if (t->args.ckpt_dir &&
            checkpoint_latest(t->args.ckpt_dir, t->resume, sizeof t->resume, &latest))
            return err_set(err, latest.code, "%s", latest.msg);
        fprintf(stderr, "fsdp: restart %d of %d from %s\n", restart, t->args.max_restarts,
                t->resume[0] ? t->resume : "the beginning (no checkpoint yet)");
        job->resume_from = t->resume[0] ? t->resume : NULL;
        if ((rc = read_best(t, err))) return rc; /* what the failed run kept as its best */
        job->has_best = t->has_best;
        job->best_val_loss = t->best_val_loss;
        memset(t->memory, 0, (size_t)t->args.ranks * sizeof *t->memory);
        *err = (Err){0};
        rc = run_ranks(t, opt, job, res, err);
    }
    return rc;
}

void run_cleanup(TrainRun *t) {
    run_dir_close(&t->run_dir);
    dir_unlock(&t->ckpt_lock);
    dir_unlock(&t->run_lock);
    atomic_discard(&t->dump);
    atomic_discard(&t->svg);
    atomic_discard(&t->trace);
    plan_free(&t->plan);
    model_desc_free(&t->model);
    dataset_free(&t->data);
    dataset_free(&t->eval);
    free(t->memory);
    free(t->params);
    train_args_free(&t->args);
}
