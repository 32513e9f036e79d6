/* checkpoint: sharded checkpoints: each rank's file and rank 0's meta.json, written in a .tmp
 * folder renamed whole; loaded at any world size (resharding); CkptMeta for `fsdp ckpt`. */
#include "io/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/bulk_file.h"
#include "models/vit.h"

/* A file inside a checkpoint directory whose own path fits 4 KiB. */
enum { FILE_MAX = 4096 + 64 };

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
static int path_of(char *buf, size_t n, const char *dir, const char *name) {
    return snprintf(buf, n, "%s/%s", dir, name) >= (int)n;
}

static int rank_file(char *buf, size_t n, const char *dir, int rank, const char *ext) {
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

/* Removes a checkpoint directory: only the files a checkpoint has, then the directory. */
static void remove_checkpoint_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[FILE_MAX];
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "rank-", 5) || !strcmp(e->d_name, "meta.json")) {
            path_of(path, sizeof path, dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

static char *slurp(const char *path, size_t *len) {
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
} Writer;

/* CRC32 of a buffer of any size: zlib's crc32 takes uInt lengths, so it is fed in parts. */
static unsigned long crc_of(const void *data, size_t bytes) {
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
                   .crc = crc_of(s->data, bytes)};
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

/* This rank's state file and its index (rank-RRRRR.json: its pieces), both synced. */
static int save_rank_files(const RankEnv *env, Engine *e, const char *tmp, int kill, Err *err) {
    char bin[FILE_MAX], idx[FILE_MAX];
    rank_file(bin, sizeof bin, tmp, env->rank, "bin");
    rank_file(idx, sizeof idx, tmp, env->rank, "json");
    Writer w = {.rank = env->rank, .kill = kill};
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

/* The model's configuration, for tools that write the model out (fsdp ckpt consolidate): the
 * ViT's, under the names PyTorch's fixture uses. The toy has none. */
static void write_config_json(FILE *f, const ModelDesc *m) {
    if (strcmp(m->name, "vit") != 0 || !m->config) return;
    const VitConfig *c = m->config;
    fprintf(f,
            "\"config\":{\"image\":%d,\"patch\":%d,\"layers\":%d,\"heads\":%d,\"hidden\":%d,"
            "\"mlp\":%d,\"classes\":%d,\"channels\":1},\n",
            c->image, c->patch, c->layers, c->heads, c->hidden, c->mlp, c->classes);
}

/* Rank 0, after every rank has written: meta.json gathers the ranks' indexes. */
static int write_meta(const RankEnv *env, Engine *e, const ModelDesc *m, const char *tmp,
                      const CheckpointInfo *info, Err *err) {
    char path[FILE_MAX];
    path_of(path, sizeof path, tmp, "meta.json");
    FILE *f = fopen(path, "w");
    if (!f) return err_set(err, ERR_IO, "cannot write %s", path);
    EngineCounters c = engine_counters(e);
    fprintf(f,
            "{\"format\":\"fsdp-checkpoint\",\"version\":%d,\"model\":\"%s\",\"strategy\":\"%s\","
            "\"world\":%d,\"step\":%ld,\"adam_steps\":%ld,\"loss_scale\":%.9g,\"good_steps\":%d,\n",
            CHECKPOINT_VERSION, info->model_name, info->strategy, env->world, info->step, c.steps,
            (double)c.loss_scale, c.good_steps);
    write_config_json(f, m);
    write_tensors_json(f, m);
    fputs("\"pieces\":[", f);
    int rc = 0, any = 0;
    for (int r = 0; !rc && r < env->world; r++) {
        char idx[FILE_MAX];
        size_t len;
        rank_file(idx, sizeof idx, tmp, r, "json");
        char *text = slurp(idx, &len);
        /* each index is a JSON list: splice its inside into ours */
        char *open = text ? strchr(text, '[') : NULL, *close = text ? strrchr(text, ']') : NULL;
        if (!open || !close || close < open) {
            rc = err_set(err, ERR_IO, "rank %d's index %s is missing or cut", r, idx);
        } else if (close > open + 1) {
            fprintf(f, "%s%.*s", any ? "," : "", (int)(close - open - 1), open + 1);
            any = 1;
        }
        free(text);
    }
    fputs("\n]}\n", f);
    if (sync_file(f) && !rc) rc = err_set(err, ERR_IO, "writing %s failed", path);
    if (fclose(f) && !rc) rc = err_set(err, ERR_IO, "writing %s failed", path);
    return rc;
}

/* Keeps the newest `keep` complete checkpoints in dir. */
static void prune(const char *dir, int keep, long newest) {
    if (keep <= 0) return;
    DIR *d = opendir(dir);
    if (!d) return;
    long steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step-%ld%c", &s, &tail) == 1 && s <= newest) steps[n++] = s;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer >= keep) {
            char path[FILE_MAX];
            snprintf(path, sizeof path, "%s/step-%08ld", dir, steps[i]);
            remove_checkpoint_dir(path);
        }
    }
}

/* Rank 0's part once every rank's files are on disk: the merged metadata, then the rename
 * that makes the checkpoint exist. */
static int publish(const RankEnv *env, Engine *e, const ModelDesc *m, const char *dir,
                   const char *tmp, const CheckpointInfo *info, Err *err) {
    int rc = write_meta(env, e, m, tmp, info, err);
    for (int r = 0; !rc && r < env->world; r++) {
        char idx[FILE_MAX];
        rank_file(idx, sizeof idx, tmp, r, "json");
        unlink(idx);
    }
    if (rc) return rc;
    sync_dir(tmp);
    char final[4096];
    snprintf(final, sizeof final, "%s/step-%08ld", dir, info->step);
    remove_checkpoint_dir(final); /* the same step saved again replaces it */
    if (rename(tmp, final) != 0)
        return err_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    sync_dir(dir);
    prune(dir, info->keep, info->step);
    return 0;
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

int checkpoint_save(const RankEnv *env, Engine *e, const ModelDesc *m, const char *dir,
                    const CheckpointInfo *info, Err *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.step-%08ld.tmp", dir, info->step);
    int rc = env->rank == 0 ? prepare_dirs(dir, tmp, err) : 0;
    if (!rc) rc = comm_barrier(env->world_comm, err);
    if (!rc) rc = save_rank_files(env, e, tmp, env->rank == 0 && info->kill_midway, err);
    if (!rc) rc = comm_barrier(env->world_comm, err);
    if (!rc && env->rank == 0) rc = publish(env, e, m, dir, tmp, info, err);
    if (!rc) rc = comm_barrier(env->world_comm, err);
    return rc;
}

/* ---------------------------------------------------------------- reading */

static int json_number(const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return -1;
    *out = v->valuedouble;
    return 0;
}

/* A whole number in [0, 2^53]: counts, sizes and offsets. */
static int is_count(double v) {
    return v >= 0 && v <= 9007199254740992.0 && v == (double)(unsigned long long)v;
}

/* The saved tensors must be this model's, name for name and shape for shape. */
static int check_tensors(const char *path, const ModelDesc *m, const cJSON *tensors, Err *err) {
    if (!cJSON_IsArray(tensors) || cJSON_GetArraySize(tensors) != m->nparams)
        return err_set(err, ERR_USAGE,
                       "checkpoint %s is of another model: %d tensors, this model has %d", path,
                       cJSON_GetArraySize(tensors), m->nparams);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const ParamSpec *p = &m->params[i];
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        int same = cJSON_IsString(name) && !strcmp(name->valuestring, p->name) &&
                   cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) {
            const cJSON *dim = cJSON_GetArrayItem(shape, d);
            same = cJSON_IsNumber(dim) && (long long)dim->valuedouble == (long long)p->shape[d];
        }
        if (!same)
            return err_set(err, ERR_USAGE,
                           "checkpoint %s is of another model: tensor %d is %s, this model's is "
                           "%s",
                           path, i, cJSON_IsString(name) ? name->valuestring : "unnamed", p->name);
        i++;
    }
    return 0;
}

/* The tensors as saved: a name, fp32, 1 to MODEL_MAX_NDIM whole dimensions. */
static int read_tensors(CkptMeta *c, const cJSON *list, Err *err) {
    if (!cJSON_IsArray(list))
        return err_set(err, ERR_USAGE, "checkpoint %s: meta.json has no tensors", c->path);
    int n = cJSON_GetArraySize(list);
    if (!(c->tensors = calloc((size_t)n + 1, sizeof *c->tensors)))
        return err_set(err, ERR_NOMEM, "out of memory reading %s", c->path);
    const cJSON *t;
    cJSON_ArrayForEach(t, list) {
        CkptTensor *out = &c->tensors[c->ntensors];
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        int ndim = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : 0;
        int ok = cJSON_IsString(name) && name->valuestring[0] &&
                 strlen(name->valuestring) < sizeof out->name && ndim >= 1 &&
                 ndim <= MODEL_MAX_NDIM &&
                 (!dtype || (cJSON_IsString(dtype) && !strcmp(dtype->valuestring, "fp32")));
        size_t numel = 1;
        for (int d = 0; ok && d < ndim; d++) {
            const cJSON *dim = cJSON_GetArrayItem(shape, d);
            ok = cJSON_IsNumber(dim) && is_count(dim->valuedouble) &&
                 !__builtin_mul_overflow(numel, (size_t)dim->valuedouble, &numel);
            if (ok) out->shape[d] = (int64_t)dim->valuedouble;
        }
        if (!ok)
            return err_set(err, ERR_USAGE,
                           "checkpoint %s: meta.json tensor %d is malformed (it needs a name, "
                           "dtype fp32 and 1 to %d dimensions)",
                           c->path, c->ntensors, MODEL_MAX_NDIM);
        snprintf(out->name, sizeof out->name, "%s", name->valuestring);
        out->ndim = ndim;
        out->numel = numel;
        out->row_elems = 1;
        for (int d = 1; d < ndim; d++) out->row_elems *= (size_t)out->shape[d];
        c->ntensors++;
    }
    return 0;
}

static int kind_of(const char *s) {
    for (int k = 0; k < STATE_KIND_COUNT; k++)
        if (!strcmp(s, state_kind_name((StateKind)k))) return k;
    return -1;
}

static int read_pieces(CkptMeta *c, const cJSON *list, Err *err) {
    if (!cJSON_IsArray(list))
        return err_set(err, ERR_USAGE, "checkpoint %s: meta.json has no pieces", c->path);
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (!(c->pieces = calloc(n + 1, sizeof *c->pieces)))
        return err_set(err, ERR_NOMEM, "out of memory loading");
    const cJSON *o;
    cJSON_ArrayForEach(o, list) {
        double v[7];
        const char *keys[] = {"tensor", "rank", "row_begin", "rows", "offset", "bytes", "crc32"};
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
        int ok = cJSON_IsString(kind) && kind_of(kind->valuestring) >= 0;
        for (int k = 0; ok && k < 7; k++) ok = !json_number(o, keys[k], &v[k]) && is_count(v[k]);
        ok = ok && v[0] < c->ntensors && v[1] < c->world && v[6] <= 4294967295.0;
        if (ok) {
            const CkptTensor *t = &c->tensors[(int)v[0]];
            ok = v[2] + v[3] <= (double)t->shape[0] &&
                 v[5] == v[3] * (double)t->row_elems * sizeof(float);
        }
        if (!ok)
            return err_set(err, ERR_USAGE, "checkpoint %s: meta.json piece %zu is malformed",
                           c->path, c->npieces);
        c->pieces[c->npieces++] = (CkptPiece){.tensor = (int)v[0],
                                              .kind = (StateKind)kind_of(kind->valuestring),
                                              .rank = (int)v[1],
                                              .row_begin = (size_t)v[2],
                                              .rows = (size_t)v[3],
                                              .offset = (unsigned long long)v[4],
                                              .bytes = (unsigned long long)v[5],
                                              .crc = (unsigned long)v[6]};
    }
    return 0;
}

static void copy_string(char *dst, size_t n, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    snprintf(dst, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* "config": {"layers": 2, ...} as text pairs; absent in checkpoints that predate it. */
static int read_config(CkptMeta *c, const cJSON *config, Err *err) {
    if (!cJSON_IsObject(config)) return 0;
    int n = cJSON_GetArraySize(config);
    if (!(c->config = calloc(2 * (size_t)n + 1, sizeof *c->config)))
        return err_set(err, ERR_NOMEM, "out of memory reading %s", c->path);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, config) {
        char value[64];
        if (cJSON_IsNumber(kv))
            snprintf(value, sizeof value, "%.17g", kv->valuedouble);
        else if (cJSON_IsString(kv))
            snprintf(value, sizeof value, "%s", kv->valuestring);
        else
            return err_set(err, ERR_USAGE, "checkpoint %s: meta.json config %s is not a value",
                           c->path, kv->string);
        char *key = strdup(kv->string), *val = strdup(value);
        c->config[2 * c->nconfig] = key;
        c->config[2 * c->nconfig + 1] = val;
        c->nconfig++;
        if (!key || !val) return err_set(err, ERR_NOMEM, "out of memory reading %s", c->path);
    }
    return 0;
}

static int read_root(CkptMeta *c, const cJSON *root, const char *path, const ModelDesc *expect,
                     Err *err) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    double version = 0, world = 0, s = 0, adam = 0, scale = 0, good = 0;
    if (!root || !cJSON_IsString(format) || strcmp(format->valuestring, "fsdp-checkpoint"))
        return err_set(err, ERR_USAGE, "%s is not an fsdp checkpoint's metadata", path);
    if (json_number(root, "version", &version) || version != CHECKPOINT_VERSION)
        return err_set(err, ERR_USAGE, "%s is format version %g; this fsdp reads version %d", path,
                       version, CHECKPOINT_VERSION);
    if (json_number(root, "world", &world) || world < 1 || world > 1e6 ||
        json_number(root, "step", &s) || s < 0 || json_number(root, "adam_steps", &adam) ||
        json_number(root, "loss_scale", &scale) || json_number(root, "good_steps", &good))
        return err_set(err, ERR_USAGE, "%s lacks the world size, step or counters", path);
    c->version = (int)version;
    c->world = (int)world;
    c->step = (long)s;
    c->counters =
        (EngineCounters){.steps = (long)adam, .loss_scale = (float)scale, .good_steps = (int)good};
    copy_string(c->model, sizeof c->model, root, "model");
    copy_string(c->strategy, sizeof c->strategy, root, "strategy");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    int rc = expect ? check_tensors(c->path, expect, tensors, err) : 0;
    if (!rc) rc = read_tensors(c, tensors, err);
    if (!rc) rc = read_pieces(c, cJSON_GetObjectItemCaseSensitive(root, "pieces"), err);
    if (!rc) rc = read_config(c, cJSON_GetObjectItemCaseSensitive(root, "config"), err);
    return rc;
}

void ckpt_meta_free(CkptMeta *m) {
    for (int r = 0; m->readers && r < m->world; r++) bulk_reader_close(m->readers[r]);
    free(m->readers);
    for (int i = 0; i < 2 * m->nconfig; i++) free(m->config[i]);
    free(m->config);
    free(m->tensors);
    free(m->pieces);
    memset(m, 0, sizeof *m);
}

int ckpt_meta_read(CkptMeta *out, const char *path, const ModelDesc *expect, Err *err) {
    memset(out, 0, sizeof *out);
    if (strlen(path) + 64 > sizeof out->path)
        return err_set(err, ERR_USAGE, "checkpoint path is too long: %.200s...", path);
    snprintf(out->path, sizeof out->path, "%s", path);
    char meta[FILE_MAX];
    size_t len;
    path_of(meta, sizeof meta, path, "meta.json");
    char *text = slurp(meta, &len);
    if (!text) return err_set(err, ERR_USAGE, "%s is not a checkpoint: cannot read %s", path, meta);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = read_root(out, root, meta, expect, err);
    cJSON_Delete(root);
    if (!rc && !(out->readers = calloc((size_t)out->world, sizeof *out->readers)))
        rc = err_set(err, ERR_NOMEM, "out of memory reading %s", meta);
    if (rc) ckpt_meta_free(out);
    return rc;
}

void ckpt_rank_file(const CkptMeta *m, int rank, char *buf, size_t n) {
    rank_file(buf, n, m->path, rank, "bin");
}

/* pread until n bytes have come (a read may return fewer); 0 at end of file or on error. */
/* Rank file `rank`'s reader, opened on first use; NULL with errno set when it cannot be. */
static BulkReader *rank_reader(const CkptMeta *m, int rank, const char *path) {
    if (!m->readers[rank] && bulk_reader_open(&m->readers[rank], path)) return NULL;
    return m->readers[rank];
}

/* Reads piece p through CRC32, into buf when given. */
static int piece_read(const CkptMeta *m, const CkptPiece *p, unsigned char *buf, Err *err) {
    char path[FILE_MAX];
    ckpt_rank_file(m, p->rank, path, sizeof path);
    const char *tensor = m->tensors[p->tensor].name, *kind = state_kind_name(p->kind);
    BulkReader *r = rank_reader(m, p->rank, path);
    if (!r) return err_set(err, ERR_USAGE, "cannot open %s: %s", path, strerror(errno));
    unsigned long crc = crc32(0L, Z_NULL, 0);
    if (bulk_read(r, p->offset, (size_t)p->bytes, buf, &crc))
        return err_set(err, ERR_USAGE, "%s is cut short: %s's %s needs bytes %llu-%llu", path,
                       tensor, kind, p->offset, p->offset + p->bytes);
    if (crc != p->crc)
        return err_set(err, ERR_USAGE, "%s is corrupt: CRC mismatch in %s's %s (rows %zu-%zu)",
                       path, tensor, kind, p->row_begin, p->row_begin + p->rows);
    return 0;
}

int ckpt_piece_read(const CkptMeta *m, const CkptPiece *p, void *buf, Err *err) {
    return piece_read(m, p, buf, err);
}

int ckpt_piece_verify(const CkptMeta *m, const CkptPiece *p, Err *err) {
    return piece_read(m, p, NULL, err);
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
        free(buf);
        if (rc) return rc;
        covered += hi - lo;
    }
    if (covered != want->rows)
        return err_set(err, ERR_USAGE, "checkpoint %s lacks rows of %s's %s (has %zu of %zu)",
                       c->path, c->tensors[want->param].name, state_kind_name(want->kind), covered,
                       want->rows);
    return 0;
}

int checkpoint_load(Engine *e, const ModelDesc *m, const char *path, long *step, Err *err) {
    CkptMeta c;
    int rc = ckpt_meta_read(&c, path, m, err);
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
