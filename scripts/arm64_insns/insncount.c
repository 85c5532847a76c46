/*
 * insncount.c — a minimal qemu TCG plugin (plugin API version 1, qemu 7.2 as Debian 12 ships it in
 * qemu-user; the static qemu-user-static cannot load plugins) for scripts/arm64_insn_count.sh: counts the
 * executed guest instructions (total, and those at addresses in [lo, hi) given as plugin arguments
 * lo=0x…,hi=0x…) with inline counters and prints "insncount: total N in_range M" at exit. The few API
 * declarations are spelled here (the documented signatures), since Debian ships no qemu-plugin.h.
 * Build: cc -O2 -shared -fPIC -o libinsncount.so insncount.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
__attribute__((visibility("default"))) int qemu_plugin_version = 1;
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op, void *ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *userdata);
void qemu_plugin_outs(const char *string);

static uint64_t total, in_range, lo, hi;
static void on_tb(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &total, n);
    if (hi > lo)
        for (size_t i = 0; i < n; i++) {
            struct qemu_plugin_insn *in = qemu_plugin_tb_get_insn(tb, i);
            uint64_t a = qemu_plugin_insn_vaddr(in);
            if (a >= lo && a < hi) qemu_plugin_register_vcpu_insn_exec_inline(in, QEMU_PLUGIN_INLINE_ADD_U64, &in_range, 1);
        }
}
static void on_exit_cb(qemu_plugin_id_t id, void *u) {
    (void)id, (void)u;
    char buf[160];
    snprintf(buf, sizeof buf, "insncount: total %llu in_range %llu\n", (unsigned long long)total, (unsigned long long)in_range);
    qemu_plugin_outs(buf);
}
__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "lo=", 3)) lo = strtoull(argv[i] + 3, NULL, 0);
        if (!strncmp(argv[i], "hi=", 3)) hi = strtoull(argv[i] + 3, NULL, 0);
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
