# The model: names, limits, tokens, the configuration grammar.
tally_add_test(test_tenant_model test_tenant_model.c LABELS unit)
