"""The sglang system account: nologin, home /opt/sglang (never created by
useradd), password locked, in the docker group, with the admins in its group."""

from pyinfra import host

from sglang_infra.operations.account import service_account
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
account = plan.account

service_account(
    name=f"Ensure {account.name} is a locked nologin system account in the docker group, with admins in its group",
    user=account.name,
    home=plan.paths.home,
    uid=account.uid,
    gid=account.gid,
    groups=["docker"],
    admins=account.admins,
)
