/*
 * test_fuzz_replay.c — the corpus replay ctest of the fuzz target (issue 11, zstd's "fuzz replay" idea): runs
 * fuzz_entries.c's LLVMFuzzerTestOneInput on every file of tests/fuzz/corpus/ and on seeded mutations of each
 * (byte flips and special bytes; ATTN_FUZZ_MUTATIONS per file, default 20, 5 under ATTN_TEST_SMALL), so the
 * harness's own checks (exact-size buffers under the sanitizers, nothing written on failure, every failure
 * named) run in every CI tier without libFuzzer.
 *   test_fuzz_replay [DIR]          replay DIR (default: the in-tree corpus)
 *   test_fuzz_replay --generate DIR N   write up to N inputs that reach a successful call, one per entry and
 *                                   status pattern, found by random search (how the seed corpus was made)
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, dirent */
#include <dirent.h>

#include "fuzz_entries.c" /* NOLINT: the target itself */
#include "harness.h"

#ifndef ATTN_FUZZ_CORPUS
#define ATTN_FUZZ_CORPUS "tests/fuzz/corpus"
#endif

static int replay_file(const char *path, uint64_t seed, int mutations) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    uint8_t buf[4096];
    const size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, n);
    if (getenv("ATTN_FUZZ_VERBOSE"))
        printf("%s: entry %d -> %s %s\n", path, fz_last_entry, attn_status_string(fz_last_status), fz_last_msg);
    th_rng r;
    th_rng_seed(&r, seed);
    uint8_t m[4096];
    static const uint8_t special[] = {0, 1, 0x7F, 0x80, 0xF0, 0xF4, 0xF8, 0xFB, 0xFC, 0xFF};
    for (int i = 0; i < mutations && n > 0; i++) {
        memcpy(m, buf, n);
        const int edits = 1 + (int)th_rng_int(&r, 0, 3);
        for (int e = 0; e < edits; e++) {
            const size_t at = (size_t)th_rng_int(&r, 0, (int64_t)n - 1);
            m[at] = th_rng_uniform(&r) < 0.5 ? (uint8_t)th_rng_int(&r, 0, 255)
                                             : special[th_rng_int(&r, 0, sizeof special - 1)];
        }
        LLVMFuzzerTestOneInput(m, n);
    }
    return 1;
}

static int generate(const char *dir, int want) {
    th_rng r;
    th_rng_seed(&r, 2026);
    int found = 0, seen[20] = {0};
    uint8_t buf[512];
    for (long tries = 0; tries < 4000000 && found < want; tries++) {
        const size_t n = 64 + (size_t)th_rng_int(&r, 0, 448);
        for (size_t i = 0; i < n; i++) {
            const double u = th_rng_uniform(&r);
            buf[i] = u < 0.6 ? (uint8_t)th_rng_int(&r, 0, 8) : (uint8_t)th_rng_int(&r, 0, 255);
        }
        buf[0] = (uint8_t)(tries % 20);
        LLVMFuzzerTestOneInput(buf, n);
        if (fz_last_status != ATTN_STATUS_OK || seen[fz_last_entry] >= 3) continue;
        seen[fz_last_entry]++;
        char path[1024];
        snprintf(path, sizeof path, "%s/ok-entry%02d-%d", dir, fz_last_entry, seen[fz_last_entry]);
        FILE *fp = fopen(path, "wb");
        if (fp) fwrite(buf, 1, n, fp), fclose(fp), found++;
    }
    printf("generated %d inputs\n", found);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "--generate") == 0) return generate(argv[2], atoi(argv[3]));
    const char *dir = argc > 1 ? argv[1] : ATTN_FUZZ_CORPUS;
    const char *env = getenv("ATTN_FUZZ_MUTATIONS");
    const int mutations = env ? atoi(env) : (th_test_small() ? 5 : 20);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "test_fuzz_replay: cannot open corpus %s\n", dir);
        return 1;
    }
    int files = 0;
    uint64_t seed = 1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        files += replay_file(path, seed++, mutations);
    }
    closedir(d);
    printf("test_fuzz_replay: %d corpus files, %d mutations each: no finding\n", files, mutations);
    return files > 0 ? 0 : 1;
}
