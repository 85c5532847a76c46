/* Prints the run-time version and checks it against the header's macro; exit 1 on mismatch. */
#include <attn/attn.h>
#include <stdio.h>

int main(void) {
    printf("attn %s\n", attn_version_string());
    return attn_version_number() == ATTN_VERSION_NUMBER ? 0 : 1;
}
