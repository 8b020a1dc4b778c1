"""The sglang system account: nologin, home /opt/sglang (never created by
useradd), password locked, in the docker group, with the admins in its group."""

from pyinfra import host

from sglang_infra import ACCOUNT
from sglang_infra.operations import service_account

service_account(
    name=f"Ensure {ACCOUNT} is a locked nologin system account in the docker group, with admins in its group",
    user=ACCOUNT,
    home=host.data.sglang_home,
    uid=host.data.sglang_uid,
    gid=host.data.sglang_gid,
    groups=["docker"],
    admins=host.data.sglang_admins,
)
