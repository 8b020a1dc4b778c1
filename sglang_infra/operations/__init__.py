"""Custom operations, one module a domain, as pyinfra keeps its own
(pyinfra.operations.files, .server, ...). Each reads the host's snapshot
(sglang_infra/run/facts.py), compares it with the wanted state it was given
(values from the host's plan), and yields commands only for the difference;
otherwise it calls host.noop. Callers import from the domain's module:

    account   service_account, layout
    files     checked_file, account_env_file, secret_file
    docker    docker_service, nvidia_runtime, image_present, toolchain_image
    stack     host_settled (a settled host's one operation); restart, the stack's decision
    models    pull_tools, model_pulled, models_pruned
    gate      not_failed_before, validated
    gateway   fleet_barrier, gateway_workers
"""
