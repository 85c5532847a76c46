/* Prints the run-time version and checks it against the header's macro; exit 1 on mismatch. Also compiles
 * against the installed experimental header (an opt-in include next to attn.h) and calls one of its entries. */
#include <attn/attn.h>
#include <attn/attn_experimental.h>
#include <stdio.h>

int main(void) {
    printf("attn %s\n", attn_version_string());
    if (attn_e8m0_to_float(127) != 1.0f) { /* 2^(127 - 127) */
        return 1;
    }
    return attn_version_number() == ATTN_VERSION_NUMBER ? 0 : 1;
}
