/*
 * cli_tolerance.c — the tolerances `attn run` / `attn check` compare with (cli/util.c): the default tables'
 * per-dtype values, and for a context on an opt-in table (attn_isa_opt_in_name) that table's stated bf16
 * tolerance (docs/SEMANTICS.md §7), so a correct opt-in result is not reported as FAIL. Names only: the tables
 * need not be runnable here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

static void test_default_tables(void **state) {
    (void)state;
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        attn_cli_use_isa_tolerance(attn_isa_name(i));
        assert_null(attn_cli_opt_in_table());
        const attn_cli_tol b = attn_cli_tol_for(ATTN_DTYPE_BF16), f = attn_cli_tol_for(ATTN_DTYPE_F32);
        assert_true(b.atol == 1e-2 && b.rtol == 1e-2 && b.lse_atol == 1e-3);
        assert_true(f.atol == 2e-5 && f.rtol == 1e-5 && f.lse_atol == 2e-5);
    }
}

static void test_opt_in_tables(void **state) {
    (void)state;
    for (int32_t i = 0; attn_isa_opt_in_name(i) != NULL; i++) {
        attn_cli_use_isa_tolerance(attn_isa_opt_in_name(i));
        assert_string_equal(attn_cli_opt_in_table(), attn_isa_opt_in_name(i));
        const attn_cli_tol b = attn_cli_tol_for(ATTN_DTYPE_BF16), f = attn_cli_tol_for(ATTN_DTYPE_F32);
        assert_true(b.atol == 2e-2 && b.rtol == 2e-2 && b.lse_atol == 2e-2);
        assert_true(f.atol == 2e-5 && f.lse_atol == 2e-5); /* f32 operands: the default tables' arithmetic */
    }
    attn_cli_use_isa_tolerance(NULL);
    assert_null(attn_cli_opt_in_table());
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_default_tables), cmocka_unit_test(test_opt_in_tables)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
