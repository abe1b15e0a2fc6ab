/*
 * libFuzzer target: the configuration file parser (tenant/config.c), which
 * `tally apply` runs on a whole file. Whatever parses must export (the
 * canonical lines of `tally export`) to a file that parses back to the same
 * items, in the same order, exporting to the same text again: export then
 * apply changes nothing. Errors must come with a message.
 */
#include <string.h>

#include "fuzz_util.h"
#include "tenant_config.h"

/* The canonical file of c into a malloc'd buffer; *len gets its length. */
static char *
export_text(const struct tenant_config *c, size_t *len)
{
    size_t cap = (c->n_plans + c->n_endpoints + c->n_tenants) * (TENANT_CONFIG_TEXT_MAX + 1) + 1;
    char *text = malloc(cap);
    size_t used = 0;
    size_t i;

    FUZZ_CHECK(text != NULL);
    for (i = 0; i < c->n_plans; i++) {
        tenant_plan_format(&c->plans[i], text + used, TENANT_CONFIG_TEXT_MAX);
        FUZZ_CHECK(strlen(text + used) < TENANT_CONFIG_TEXT_MAX - 1); /* not truncated */
        used += strlen(text + used);
        text[used++] = '\n';
    }
    for (i = 0; i < c->n_endpoints; i++) {
        tenant_endpoint_format(&c->endpoints[i], text + used, TENANT_CONFIG_TEXT_MAX);
        FUZZ_CHECK(strlen(text + used) < TENANT_CONFIG_TEXT_MAX - 1);
        used += strlen(text + used);
        text[used++] = '\n';
    }
    for (i = 0; i < c->n_tenants; i++) {
        tenant_account_format(&c->tenants[i], text + used, TENANT_CONFIG_TEXT_MAX);
        FUZZ_CHECK(strlen(text + used) < TENANT_CONFIG_TEXT_MAX - 1);
        used += strlen(text + used);
        text[used++] = '\n';
    }
    text[used] = '\0';
    *len = used;
    return text;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tenant_config c, back;
    char err[512] = "";
    char *text = NULL, *again = NULL;
    size_t len = 0, len2 = 0;
    int rc;

    rc = tenant_config_parse((const char *)data, size, &c, err, sizeof(err));
    if (rc != TALLY_OK) {
        FUZZ_CHECK(err[0] != '\0');
        FUZZ_CHECK(c.plans == NULL && c.endpoints == NULL && c.tenants == NULL);
        return 0;
    }
    text = export_text(&c, &len);
    rc = tenant_config_parse(text, len, &back, err, sizeof(err));
    if (rc != TALLY_OK)
        fprintf(stderr, "export does not parse: %s\n%s", err, text);
    FUZZ_CHECK(rc == TALLY_OK);
    FUZZ_CHECK(back.n_plans == c.n_plans && back.n_endpoints == c.n_endpoints &&
               back.n_tenants == c.n_tenants);
    again = export_text(&back, &len2);
    FUZZ_CHECK(len == len2 && memcmp(text, again, len) == 0);
    free(again);
    free(text);
    tenant_config_release(&back);
    tenant_config_release(&c);
    return 0;
}
