"""The sglang system account: nologin, home /opt/sglang (never created by
useradd), password locked, in the docker group, with the admins in its group."""

from pyinfra import host

from sglang_infra.operations.account import service_account
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)

service_account(
    name=f"Ensure {plan.account} is a locked nologin system account in the docker group, with admins in its group",
    user=plan.account,
    home=plan.paths.home,
    uid=plan.uid,
    gid=plan.gid,
    groups=["docker"],
    admins=plan.admins,
)
