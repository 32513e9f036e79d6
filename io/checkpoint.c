/* checkpoint: sharded checkpoints: each rank's file and rank 0's meta.json, written in a .tmp
 * folder renamed whole, the best kept beside them; loaded at any world size (resharding) through
 * checkpoint_read.c's checked CkptMeta. */
#include "io/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/bulk_file.h"
#include "io/checkpoint_internal.h"

/* The pieces a rank saved, as they are written. */
typedef struct PieceList {
    CkptPiece *p;
    size_t n, cap;
} PieceList;

static int pieces_add(PieceList *l, CkptPiece p) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        CkptPiece *grown = realloc(l->p, cap * sizeof *grown);
        if (!grown) return -1;
        l->p = grown;
        l->cap = cap;
    }
    l->p[l->n++] = p;
    return 0;
}

/* ---------------------------------------------------------------- paths and files */

/* Paths are cut at the buffer (4 KiB): a directory that long fails to open, which says so. */
int ckpt_file_path(char *buf, size_t n, const char *dir, const char *name) {
    return snprintf(buf, n, "%s/%s", dir, name) >= (int)n;
}

int ckpt_rank_path(char *buf, size_t n, const char *dir, int rank, const char *ext) {
    return snprintf(buf, n, "%s/rank-%05d.%s", dir, rank, ext) >= (int)n;
}

/* Flushes a file's data to the disk: a checkpoint counts only once it is there. */
static int sync_file(FILE *f) {
    return fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -1;
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Removes a checkpoint directory: only the files a checkpoint has, then the directory; `die`
 * (fault injection) SIGKILLs the process after the first file. */
static void remove_checkpoint_files(const char *dir, int die) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[FILE_MAX];
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "rank-", 5) || !strcmp(e->d_name, "meta.json")) {
            ckpt_file_path(path, sizeof path, dir, e->d_name);
            unlink(path);
            if (die) raise(SIGKILL);
        }
    closedir(d);
    rmdir(dir);
}

static void remove_checkpoint_dir(const char *dir) {
    remove_checkpoint_files(dir, 0);
}

char *ckpt_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1))) {
        if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        } else {
            buf[size] = 0;
            *len = (size_t)size;
        }
    }
    fclose(f);
    return buf;
}

/* ---------------------------------------------------------------- saving */

typedef struct Writer {
    BulkFile *f;
    int rank;
    int kill; /* CheckpointInfo.kill_midway, on rank 0 */
    PieceList pieces;
    long nonfinite; /* the first (by piece_key) piece holding a value that is not finite; -1 */
} Writer;

/* A piece's tensor and kind as one number, ordered as the model's tensors and then the kinds. */
static long piece_key(int param, StateKind kind) {
    return (long)param * STATE_KIND_COUNT + (long)kind;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* CRC32 of a buffer of any size: zlib's crc32 takes uInt lengths, so it is fed in parts. */
unsigned long ckpt_crc(const void *data, size_t bytes) {
    unsigned long crc = crc32(0L, Z_NULL, 0);
    for (size_t at = 0; at < bytes; at += 1u << 30) {
        size_t part = bytes - at < (1u << 30) ? bytes - at : (1u << 30);
        crc = crc32(crc, (const Bytef *)data + at, (uInt)part);
    }
    return crc;
}

static int write_piece(void *user, const StatePiece *s, Err *err) {
    Writer *w = user;
    size_t bytes = s->rows * s->row_elems * sizeof(float);
    CkptPiece p = {.tensor = s->param,
                   .kind = s->kind,
                   .rank = w->rank,
                   .row_begin = s->row_begin,
                   .rows = s->rows,
                   .offset = bulk_size(w->f),
                   .bytes = bytes,
                   .crc = ckpt_crc(s->data, bytes)};
    long key = piece_key(s->param, s->kind);
    if ((w->nonfinite < 0 || key < w->nonfinite) && !all_finite(s->data, s->rows * s->row_elems))
        w->nonfinite = key;
    if (bulk_write(w->f, s->data, bytes, err)) return ERR_IO;
    if (pieces_add(&w->pieces, p)) return err_set(err, ERR_NOMEM, "out of memory saving");
    if (w->kill) raise(SIGKILL);
    return 0;
}

static void write_piece_json(FILE *f, const CkptPiece *p, int first) {
    fprintf(f,
            "%s\n{\"tensor\":%d,\"kind\":\"%s\",\"rank\":%d,\"row_begin\":%zu,\"rows\":%zu,"
            "\"offset\":%llu,\"bytes\":%llu,\"crc32\":%lu}",
            first ? "" : ",", p->tensor, state_kind_name(p->kind), p->rank, p->row_begin, p->rows,
            p->offset, p->bytes, p->crc);
}

/* This rank's state file and its index (rank-RRRRR.json: its pieces), both synced; *nonfinite:
 * the first piece holding a value that is not finite (piece_key), -1 when none does. */
static int save_rank_files(const RankEnv *env, Engine *e, const char *tmp, int kill,
                           long *nonfinite, Err *err) {
    char bin[FILE_MAX], idx[FILE_MAX];
    ckpt_rank_path(bin, sizeof bin, tmp, env->rank, "bin");
    ckpt_rank_path(idx, sizeof idx, tmp, env->rank, "json");
    Writer w = {.rank = env->rank, .kill = kill, .nonfinite = -1};
    int rc = bulk_open(&w.f, bin, err);
    if (rc) return rc;
    rc = engine_save_state(e, write_piece, &w, err);
    if (rc)
        bulk_abandon(w.f);
    else
        rc = bulk_close(w.f, err); /* synced */
    FILE *f = rc ? NULL : fopen(idx, "w");
    if (!rc && !f) rc = err_set(err, ERR_IO, "cannot write %s", idx);
    if (f) {
        fputc('[', f);
        for (size_t i = 0; i < w.pieces.n; i++) write_piece_json(f, &w.pieces.p[i], i == 0);
        fputs("]\n", f);
        if (sync_file(f) || fclose(f)) rc = err_set(err, ERR_IO, "writing %s failed", idx);
    }
    free(w.pieces.p);
    *nonfinite = w.nonfinite;
    return rc;
}

static void write_tensors_json(FILE *f, const ModelDesc *m) {
    fputs("\"tensors\":[", f);
    for (int i = 0; i < m->nparams; i++) {
        const ParamSpec *p = &m->params[i];
        fprintf(f, "%s\n{\"name\":\"%s\",\"dtype\":\"fp32\",\"shape\":[", i ? "," : "", p->name);
        for (int d = 0; d < p->ndim; d++)
            fprintf(f, "%s%lld", d ? "," : "", (long long)p->shape[d]);
        fputs("]}", f);
    }
    fputs("],\n", f);
}

/* The model's sizes, for tools that write the model out (fsdp ckpt consolidate) and for readers
 * to build it back: its kind's (the ViT's under the names PyTorch's fixture uses, the
 * transformer's under its flags' names). A model of none (the toy) writes no "config". */
static void write_config_json(FILE *f, const ModelDesc *m, const ModelKinds *kinds) {
    const ModelKind *kind = kinds ? model_kind_named(kinds, m->name) : NULL;
    if (!kind || !kind->nsizes || !m->config) return;
    long sizes[MODEL_MAX_SIZES];
    kind->sizes_of(m, sizes);
    for (int i = 0; i < kind->nsizes; i++)
        fprintf(f, "%s\"%s\":%ld", i ? "," : "\"config\":{", kind->sizes[i], sizes[i]);
    fputs("},\n", f);
}

/* --val-size: how many samples the run holds out and, when they were evaluated at this step, their
 * mean loss, with every digit a double has (a resumed run compares its validations with the
 * loss of dir/best). A loss that is not finite is left out: JSON has no nan, and it is no best. */
static void write_validation_json(FILE *f, const CheckpointInfo *info) {
    if (info->held_out <= 0) return;
    fprintf(f, "\"held_out\":%ld", info->held_out);
    if (info->validated && isfinite(info->val_loss))
        fprintf(f, ",\"val_loss\":%.17g", info->val_loss);
    fputs(",\n", f);
}

/* A run whose rate varies: its whole curve, every field, so that a resumed run can be held to it
 * and a person reads what the rates were (`fsdp ckpt info`). A constant rate records nothing. */
static void write_lr_curve_json(FILE *f, const CheckpointInfo *info) {
    const LrCurve *c = info->lr_curve;
    if (!c || !lr_schedule_varies(&c->schedule)) return;
    const LrSchedule *s = &c->schedule;
    fprintf(f,
            "\"lr_schedule\":{\"kind\":\"%s\",\"lr\":%.9g,\"warmup_steps\":%ld,\"min_lr\":%.9g,"
            "\"step_size\":%ld,\"gamma\":%.17g,\"total_steps\":%ld},\n",
            lr_schedule_name(s->kind), (double)c->lr, s->warmup_steps, (double)s->min_lr,
            s->step_size, s->gamma, c->total_steps);
}

/* meta.json's last line is `"crc32":N}`: N is the CRC32 (zlib's) of every byte before that
 * line. A line of its own rather than a member computed over some canonical form of the rest,
 * so that a reader checks it on the bytes, before it parses or believes anything, and so can a
 * person: `head -n -1 meta.json | gzip -c | tail -c 8 | od -An -tu4 -N4` prints N (gzip's
 * trailer starts with the same CRC32). The file stays one JSON object that jq and people read
 * as before; `jq .crc32` gives N. */

/* Rank 0, after every rank has written: meta.json gathers the ranks' indexes. Built in memory
 * first, since its last line is the CRC32 of all the others. */
static int write_meta(const RankEnv *env, Engine *e, const ModelDesc *m, const char *tmp,
                      const CheckpointInfo *info, Err *err) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return err_set(err, ERR_NOMEM, "out of memory writing %s/meta.json", tmp);
    EngineCounters c = engine_counters(e);
    fprintf(f,
            "{\"format\":\"fsdp-checkpoint\",\"version\":%d,\"model\":\"%s\",\"strategy\":\"%s\","
            "\"world\":%d,\"step\":%ld,\"adam_steps\":%ld,\"loss_scale\":%.9g,\"good_steps\":%d,\n",
            CHECKPOINT_VERSION, info->model_name, info->strategy, env->world, info->step, c.steps,
            (double)c.loss_scale, c.good_steps);
    write_validation_json(f, info);
    write_lr_curve_json(f, info);
    write_config_json(f, m, info->kinds);
    write_tensors_json(f, m);
    fputs("\"pieces\":[", f);
    int rc = 0, any = 0;
    for (int r = 0; !rc && r < env->world; r++) {
        char idx[FILE_MAX];
        size_t idx_len;
        ckpt_rank_path(idx, sizeof idx, tmp, r, "json");
        char *index = ckpt_slurp(idx, &idx_len);
        /* each index is a JSON list: splice its inside into ours */
        char *open = index ? strchr(index, '[') : NULL;
        char *close = index ? strrchr(index, ']') : NULL;
        if (!open || !close || close < open) {
            rc = err_set(err, ERR_IO, "rank %d's index %s is missing or cut", r, idx);
        } else if (close > open + 1) {
            fprintf(f, "%s%.*s", any ? "," : "", (int)(close - open - 1), open + 1);
            any = 1;
        }
        free(index);
    }
    fputs("\n],\n", f);
    if (fclose(f) && !rc) rc = err_set(err, ERR_NOMEM, "out of memory writing %s/meta.json", tmp);
    char path[FILE_MAX];
    ckpt_file_path(path, sizeof path, tmp, "meta.json");
    FILE *out = rc ? NULL : fopen(path, "w");
    if (!rc && !out) rc = err_set(err, ERR_IO, "cannot write %s", path);
    if (out) {
        if (fwrite(text, 1, len, out) != len ||
            fprintf(out, "%s%lu}\n", META_CRC_KEY, ckpt_crc(text, len)) < 0 || sync_file(out))
            rc = err_set(err, ERR_IO, "writing %s failed", path);
        if (fclose(out) && !rc) rc = err_set(err, ERR_IO, "writing %s failed", path);
    }
    free(text);
    return rc;
}

/* Removes checkpoint dir/name in a way a kill at any point cannot make look whole: it is first
 * renamed out of the step-N names readers look at (rename(2) is atomic), then emptied. A kill
 * leaves a .removing folder that nothing reads and the next prune finishes. */
static void retire_checkpoint(const char *dir, const char *name, int die) {
    char from[FILE_MAX], to[FILE_MAX];
    ckpt_file_path(from, sizeof from, dir, name);
    snprintf(to, sizeof to, "%s/.%s.removing", dir, name);
    remove_checkpoint_dir(to); /* one a kill left */
    remove_checkpoint_files(rename(from, to) == 0 ? to : from, die);
}

/* Keeps the newest `keep` complete checkpoints in dir, and finishes removals a kill cut short;
 * `die`: fault injection, in the first removal. */
static void prune(const char *dir, int keep, long newest, int die) {
    if (keep <= 0) return;
    DIR *d = opendir(dir);
    if (!d) return;
    long steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        long s;
        char tail, left[FILE_MAX];
        if (sscanf(e->d_name, "step-%ld%c", &s, &tail) == 1 && s <= newest) steps[n++] = s;
        if (sscanf(e->d_name, ".step-%ld.removin%c", &s, &tail) == 2 && tail == 'g') {
            ckpt_file_path(left, sizeof left, dir, e->d_name);
            remove_checkpoint_dir(left);
        }
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer >= keep) {
            char name[64];
            snprintf(name, sizeof name, "step-%08ld", steps[i]);
            retire_checkpoint(dir, name, die);
        }
    }
}

/* ---------------------------------------------------------------- the best checkpoint
 *
 * dir/best is a symbolic link to dir/.best-NNNNNNNN, a checkpoint directory like the others. A
 * new best is made whole beside the old one and synced; then a link to it, made under a
 * temporary name, is renamed over dir/best, which rename(2) does atomically; then the old
 * directory goes. Killed at any point, dir/best is the old best or the new one, whole, and what
 * is left over (a directory no link names) is removed by the next best's save. A link rather
 * than a directory renamed into place: rename(2) replaces a link, never a directory that has
 * files, and `ls -l` shows which step is the best. Its files are hard links to the step's own,
 * which are never written again once renamed into place, so the best costs no space and
 * outlives the step's directory when --keep prunes it; a file system without hard links gets a
 * copy. */

static const char BEST_LINK[] = "best", BEST_PREFIX[] = ".best-";

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    int ok = in && out;
    char buf[1 << 16];
    for (size_t n; ok && (n = fread(buf, 1, sizeof buf, in)) > 0;) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in) && sync_file(out) == 0;
    if (out && fclose(out)) ok = 0;
    if (in) fclose(in);
    return ok ? 0 : -1;
}

/* Every file of checkpoint directory `from` (its rank files and meta.json) into `to`. */
static int link_checkpoint_files(const char *from, const char *to, Err *err) {
    DIR *d = opendir(from);
    if (!d) return err_set(err, ERR_IO, "cannot read %s: %s", from, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (strncmp(e->d_name, "rank-", 5) && strcmp(e->d_name, "meta.json")) continue;
        char src[FILE_MAX], dst[FILE_MAX];
        if (ckpt_file_path(src, sizeof src, from, e->d_name) ||
            ckpt_file_path(dst, sizeof dst, to, e->d_name))
            rc = err_set(err, ERR_IO, "checkpoint path too long: %.200s...", to);
        else if (link(src, dst) != 0 && copy_file(src, dst) != 0)
            rc =
                err_set(err, ERR_IO, "cannot link or copy %s to %s: %s", src, dst, strerror(errno));
    }
    closedir(d);
    return rc;
}

/* The name dir/best points to ("" when there is no link); 0, or -1 when dir/best is something
 * other than a symbolic link. */
static int best_target(const char *dir, char *target, size_t n) {
    char link_path[FILE_MAX];
    struct stat sb;
    ckpt_file_path(link_path, sizeof link_path, dir, BEST_LINK);
    target[0] = 0;
    if (lstat(link_path, &sb) != 0) return 0;
    if (!S_ISLNK(sb.st_mode)) return -1;
    ssize_t len = readlink(link_path, target, n - 1);
    target[len > 0 ? len : 0] = 0;
    return 0;
}

/* Removes what earlier bests left: every dir/.best-* but `keep`. */
static void remove_old_bests(const char *dir, const char *keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char names[64][64];
    int n = 0;
    while ((e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, BEST_PREFIX, sizeof BEST_PREFIX - 1) && strcmp(e->d_name, keep) &&
            len < sizeof names[0])
            memcpy(names[n++], e->d_name, len + 1); /* ours are .best-NNNNNNNN[.1] */
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        char path[FILE_MAX];
        ckpt_file_path(path, sizeof path, dir, names[i]);
        remove_checkpoint_dir(path);
    }
}

/* Makes `from` dir/best: moved (best_only: the step's temporary directory) or linked file by file
 * (a published step-NNNNNNNN) into dir/.best-NNNNNNNN, which dir/best then points to. The same
 * step made best again (a restarted run's) goes to .best-NNNNNNNN.1, so that the directory the
 * link still names is never the one being made. */
static int publish_best(const char *dir, const char *from, int move, long step, Err *err) {
    char current[256], name[64], path[FILE_MAX], link_tmp[FILE_MAX], link_path[FILE_MAX];
    if (best_target(dir, current, sizeof current))
        return err_set(err, ERR_USAGE, "%s/%s is not the link fsdp keeps to the best checkpoint",
                       dir, BEST_LINK);
    snprintf(name, sizeof name, "%s%08ld", BEST_PREFIX, step);
    if (!strcmp(current, name)) snprintf(name, sizeof name, "%s%08ld.1", BEST_PREFIX, step);
    ckpt_file_path(path, sizeof path, dir, name);
    remove_checkpoint_dir(path); /* what a killed save left behind */
    if (move ? rename(from, path) != 0 : mkdir(path, 0777) != 0)
        return err_set(err, ERR_IO, "cannot make %s: %s", path, strerror(errno));
    int rc = move ? 0 : link_checkpoint_files(from, path, err);
    if (rc) return rc;
    sync_dir(path);
    ckpt_file_path(link_tmp, sizeof link_tmp, dir, ".best.link.tmp");
    ckpt_file_path(link_path, sizeof link_path, dir, BEST_LINK);
    unlink(link_tmp);
    if (symlink(name, link_tmp) != 0 || rename(link_tmp, link_path) != 0)
        return err_set(err, ERR_IO, "cannot point %s at %s: %s", link_path, name, strerror(errno));
    sync_dir(dir);
    remove_old_bests(dir, name);
    return 0;
}

int checkpoint_best(const char *dir, char *path, size_t n, Err *err) {
    char target[256];
    path[0] = 0;
    if (best_target(dir, target, sizeof target))
        return err_set(err, ERR_USAGE,
                       "%s/%s is not the link fsdp keeps to the best checkpoint (a symbolic link "
                       "to %s/.best-NNNNNNNN): move it away, or give another --checkpoint-dir",
                       dir, BEST_LINK, dir);
    if (target[0]) snprintf(path, n, "%s/%s", dir, BEST_LINK);
    return 0;
}

/* Rank 0's part once every rank's files are on disk: the merged metadata, then the rename
 * that makes the checkpoint exist (and, for the best, the link that names it). */
static int publish(const RankEnv *env, Engine *e, const ModelDesc *m, const char *dir,
                   const char *tmp, const CheckpointInfo *info, Err *err) {
    int rc = write_meta(env, e, m, tmp, info, err);
    for (int r = 0; !rc && r < env->world; r++) {
        char idx[FILE_MAX];
        ckpt_rank_path(idx, sizeof idx, tmp, r, "json");
        unlink(idx);
    }
    if (rc) return rc;
    sync_dir(tmp);
    if (info->best_only) return publish_best(dir, tmp, 1, info->step, err);
    char final[4096], name[64];
    snprintf(name, sizeof name, "step-%08ld", info->step);
    snprintf(final, sizeof final, "%s/%s", dir, name);
    retire_checkpoint(dir, name, 0); /* the same step saved again replaces it */
    if (rename(tmp, final) != 0)
        return err_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    sync_dir(dir);
    prune(dir, info->keep, info->step, info->kill_midway == CKPT_KILL_IN_PRUNE);
    return info->best ? publish_best(dir, final, 0, info->step, err) : 0;
}

/* Rank 0 makes the directory and a fresh temporary one before anybody writes. */
static int prepare_dirs(const char *dir, const char *tmp, Err *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return err_set(err, ERR_USAGE, "cannot create checkpoint directory %s: %s", dir,
                       strerror(errno));
    remove_checkpoint_dir(tmp); /* what a killed save left behind */
    if (mkdir(tmp, 0777) != 0)
        return err_set(err, ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    return 0;
}

/* Once every rank has written its files (so, as the barrier it replaces): whether any rank's
 * state holds a value that is not finite, every rank learning the first such piece (by
 * piece_key, the same on every rank). Such a state is not published: resumed, it would train
 * nothing but nan. *nonfinite: this rank's in, the first of all ranks' out (-1: none). */
static int agree_finite(const RankEnv *env, long *nonfinite, Err *err) {
    /* the largest of the negated keys is the smallest key; -2^24 (exact in fp32) is none */
    float v = *nonfinite < 0 ? -16777216.0f : -(float)*nonfinite;
    int rc = comm_all_reduce(env->world_comm, &v, &v, 1, DTYPE_FP32, REDUCE_MAX, -1, err);
    *nonfinite = v == -16777216.0f ? -1 : (long)-v;
    return rc;
}

int checkpoint_save(const RankEnv *env, Engine *e, const ModelDesc *m, const char *dir,
                    const CheckpointInfo *info, Err *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.step-%08ld.tmp", dir, info->step);
    long nonfinite = -1;
    int rc = env->rank == 0 ? prepare_dirs(dir, tmp, err) : 0;
    if (!rc) rc = comm_barrier(env->world_comm, err);
    if (!rc)
        rc = save_rank_files(env, e, tmp,
                             env->rank == 0 && info->kill_midway == CKPT_KILL_IN_RANK_FILES,
                             &nonfinite, err);
    if (!rc) rc = agree_finite(env, &nonfinite, err);
    if (!rc && nonfinite >= 0) {
        if (env->rank == 0) remove_checkpoint_dir(tmp);
        rc = comm_barrier(env->world_comm, err); /* none ends the run before the files are gone */
        return rc ? rc
                  : err_set(err, ERR_DIVERGED, "%s's %s holds values that are not finite",
                            m->params[nonfinite / STATE_KIND_COUNT].name,
                            state_kind_name((StateKind)(nonfinite % STATE_KIND_COUNT)));
    }
    if (!rc && env->rank == 0) rc = publish(env, e, m, dir, tmp, info, err);
    if (!rc) rc = comm_barrier(env->world_comm, err);
    /* a save that failed (a full disk, a file too large) leaves none of its bytes behind: every
     * rank that sees the failure removes the temporary folder, whose files are all a save's */
    if (rc) remove_checkpoint_dir(tmp);
    return rc;
}

/* ---------------------------------------------------------------- loading */

/* Fills a piece the engine keeps from every saved piece that overlaps it. */
static int fill_piece(void *user, const StatePiece *want, Err *err) {
    const CkptMeta *c = user;
    size_t covered = 0, row = want->row_elems * sizeof(float);
    for (size_t i = 0; i < c->npieces; i++) {
        const CkptPiece *p = &c->pieces[i];
        if (p->tensor != want->param || p->kind != want->kind) continue;
        size_t lo = p->row_begin > want->row_begin ? p->row_begin : want->row_begin;
        size_t hi_p = p->row_begin + p->rows, hi_w = want->row_begin + want->rows;
        size_t hi = hi_p < hi_w ? hi_p : hi_w;
        if (lo >= hi) continue;
        char *into = (char *)want->data + (lo - want->row_begin) * row;
        /* a saved piece wholly inside the wanted rows (always, at the same world size) is read
         * in place; one that straddles them is read whole, for its CRC, and the rows copied */
        int whole = lo == p->row_begin && hi == hi_p;
        unsigned char *buf = whole ? NULL : malloc(p->bytes ? p->bytes : 1);
        if (!whole && !buf) return err_set(err, ERR_NOMEM, "out of memory loading a checkpoint");
        int rc = ckpt_piece_read(c, p, whole ? (void *)into : buf, err);
        if (!rc && !whole) memcpy(into, buf + (lo - p->row_begin) * row, (hi - lo) * row);
        free(buf); /* ckpt_piece_read refused a value that is not finite */
        if (rc) return rc;
        covered += hi - lo;
    }
    if (covered != want->rows)
        return err_set(err, ERR_USAGE, "checkpoint %s lacks rows of %s's %s (has %zu of %zu)",
                       c->path, c->tensors[want->param].name, state_kind_name(want->kind), covered,
                       want->rows);
    return 0;
}

int checkpoint_load(Engine *e, const ModelDesc *m, const ModelKinds *kinds, const char *path,
                    long *step, Err *err) {
    CkptMeta c;
    int rc = ckpt_meta_read(&c, path, kinds, m, err);
    if (!rc) rc = engine_load_state(e, fill_piece, &c, err);
    if (!rc) {
        engine_set_counters(e, c.counters);
        *step = c.step;
    }
    ckpt_meta_free(&c);
    return rc;
}

int checkpoint_latest(const char *dir, char *path, size_t n, Err *err) {
    path[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0; /* nothing saved yet */
        return err_set(err, ERR_USAGE, "cannot read checkpoint directory %s: %s", dir,
                       strerror(errno));
    }
    long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s;
        char tail, meta[FILE_MAX];
        if (sscanf(e->d_name, "step-%ld%c", &s, &tail) != 1 || s <= best) continue;
        snprintf(meta, sizeof meta, "%s/%s/meta.json", dir, e->d_name);
        if (access(meta, R_OK) == 0) best = s;
    }
    closedir(d);
    if (best >= 0) snprintf(path, n, "%s/step-%08ld", dir, best);
    return 0;
}
