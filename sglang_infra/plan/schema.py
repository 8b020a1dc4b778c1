"""The shape of every `sglang_*` data key: its type, what values make sense,
and how to fix a wrong one. Defaults and their reasons live only in
group_data/all.py; this module only judges values.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..machine.gpus import DERIVE
from .gateway_pin import GATEWAY_VERSION

# An image reference: [registry[:port]/]path[:tag][@sha256:<64 hex>]
_IMAGE_RE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_FLAG_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:=/-]+$")
_SHARE_RE = re.compile(r"^[1-9][0-9]?%$")   # a share of a pool: "1%" to "99%"

DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


@dataclass(frozen=True)
class Key:
    kind: str                      # what the value must be, in words
    check: Callable[[Any], bool]   # True when the value is acceptable
    fix: str                       # how to write a good value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float))) and not isinstance(value, bool)


def _int_range(low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: _is_int(v) and low <= v <= high


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _one_of(*choices: Any) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _flag_word(value: Any) -> bool:
    return isinstance(value, str) and bool(_FLAG_VALUE_RE.fullmatch(value))


def _abs_path(value: Any) -> bool:
    return (
        isinstance(value, str) and value.startswith("/") and value != "/"
        and "//" not in value and not value.endswith("/")
        and all(part not in (".", "..") for part in value.split("/"))
        and re.fullmatch(r"^[A-Za-z0-9_./-]+$", value) is not None
    )


def _ip(value: Any) -> bool:
    try:
        ipaddress.ip_address(value)
    except (TypeError, ValueError):
        return False
    return True


def _fleet_ip(value: Any) -> bool:
    """An IP address other hosts can reach: not loopback (127.x, ::1) and not every address (0.0.0.0, ::)."""
    from .peerdoor import address_problem

    return _ip(value) and address_problem(value) is None


# A Prometheus duration, as its flags and rule files take it: units from ms to y, largest first, e.g. '1h30m'.
_DURATION_RE = re.compile(r"^(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?$")


def _duration(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and bool(_DURATION_RE.fullmatch(value)) \
        and any(ch != "0" for ch in value if ch.isdigit())


def listen_address(value: Any) -> tuple[str, int] | None:
    """(IP address, port) of an 'address:port' ('[v6]:port' for IPv6), or None when it is not one."""
    if not isinstance(value, str):
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        return None
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return (host, int(port)) if _ip(host) and (":" not in host or value.startswith("[")) else None


def image_problem(value: Any) -> str | None:
    """Why an image reference is not a pinned one, or None when it is."""
    if not isinstance(value, str) or not value:
        return "it must be a string such as 'lmsysorg/sglang:v0.5.16'"
    match = _IMAGE_RE.fullmatch(value)
    if not match:
        return f"{value!r} is not a valid image reference"
    if match["digest"]:
        return None
    if not match["tag"]:
        return f"{value!r} has no tag, so it floats to whatever 'latest' is on the day of the pull"
    if match["tag"] == "latest":
        return f"{value!r} uses the floating 'latest' tag"
    return None


def by_digest(value: Any) -> bool:
    """Whether an image reference names its image by digest (repo@sha256:...)."""
    match = _IMAGE_RE.fullmatch(value) if isinstance(value, str) else None
    return bool(match and match["digest"])


def _usernames(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and all(isinstance(v, str) and _USER_RE.fullmatch(v) and v not in ("root", "sglang") for v in value)
        and len(set(value)) == len(value)
    )


def _gpus(value: Any) -> bool:
    return value == "all" or (_is_int(value) and 1 <= value <= 64)


# Set by the deploy itself (templates/compose.yaml.j2, and the toolchain image's ENV): sglang_extra_env may not
# set them again. A test keeps this list equal to what the templates render.
DEPLOY_ENV = ("HF_HOME", "HF_HUB_OFFLINE", "HF_MODULES_CACHE", "XDG_CACHE_HOME", "SGLANG_MAMBA_CONV_DTYPE",
              "CUDA_HOME", "PATH")


def _env_mapping(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and k not in DEPLOY_ENV
        and isinstance(v, str) and "\n" not in v and "\0" not in v
        for k, v in value.items())


# System directories: the deploy chowns and chmods its home and tools directory, so neither may be one of
# these (nor a directory below the world-writable or virtual ones).
SYSTEM_DIRS = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/etc", "/usr/local/include", "/usr/local/lib", "/usr/local/sbin",
    "/usr/local/share", "/usr/local/src", "/usr/sbin", "/usr/share", "/usr/src", "/var/backups", "/var/cache",
    "/var/lib", "/var/local", "/var/lock", "/var/log", "/var/mail", "/var/opt", "/var/run", "/var/spool",
    "/var/tmp", "/var/lib/docker",
})
NO_DIRS_BELOW = ("/dev/", "/proc/", "/sys/", "/run/", "/tmp/", "/var/tmp/", "/etc/", "/boot/", "/usr/", "/root/",
                 "/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/lost+found/", "/snap/",
                 # The system's spools, logs, mail, caches and backups (/var/spool/cron/crontabs is root's crontab).
                 "/var/spool/", "/var/log/", "/var/mail/", "/var/cache/", "/var/backups/", "/var/run/", "/var/lock/",
                 # The system's own state under /var/lib (a directory of its own there, e.g. /var/lib/sglang-tools,
                 # is fine): the package managers, the init system, the container engines, the login stack.
                 *(f"/var/lib/{name}/" for name in (
                     "docker", "containerd", "dpkg", "apt", "aptitude", "systemd", "dbus", "polkit-1", "sudo", "pam",
                     "ucf", "private", "machines", "cloud", "snapd", "nvidia", "nvidia-container-toolkit", "ssh",
                     "dhcp", "NetworkManager", "cron", "logrotate", "man-db", "misc", "python")))


def system_dir_problem(path: str) -> str | None:
    """Why ``path`` must not be a directory the deploy owns, or None."""
    if path in SYSTEM_DIRS:
        return f"{path} is a system directory, which the deploy would re-own and re-mode"
    below = next((top for top in NO_DIRS_BELOW if (path + "/").startswith(top)), None)
    if below == path + "/":
        return f"{path} is a system directory, which the deploy would re-own and re-mode"
    if below:
        return f"{path} is below {below.rstrip('/')}, which is the system's (or world-writable)"
    return None


def _readable_file(value: Any) -> bool:
    """A path on the control machine to a file the deploy can read (a key, a token, an image archive)."""
    return isinstance(value, str) and os.path.isfile(value) and os.access(value, os.R_OK)


def _http_url(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"^https?://[^\s/]+(/[^\s]*)?$", value) is not None


def _index_url(value: Any) -> bool:
    """None, or an http(s) URL whose only placeholder is {cuda_flavor}."""
    if value is None:
        return True
    try:
        expanded = value.format(cuda_flavor="cu130") if isinstance(value, str) else None
    except (KeyError, IndexError, ValueError):
        return False
    return _http_url(expanded)


def _release(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"^[0-9]+(\.[0-9]+){1,3}$", value) is not None


def _fingerprint(value: Any) -> bool:
    """A key's full fingerprint: 40 hex digits, no spaces (resolve upper-cases it)."""
    return isinstance(value, str) and re.fullmatch(r"[0-9A-Fa-f]{40}", value) is not None


_FINGERPRINT_FIX = ("use the key's full fingerprint, 40 hex digits without spaces "
                    "(`gpg --show-keys --with-colons KEYFILE`, its fpr line), e.g. ")


def _https_url(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"^https://[^\s/]+(/[^\s]*)?$", value) is not None


# The pinned SMG's --policy choices (smg/router_args.py, COMMON_POLICY_CHOICES; its version: gateway_pin.py).
GATEWAY_POLICIES = ("random", "round_robin", "passthrough", "cache_aware", "power_of_two", "least_load", "manual",
                    "consistent_hashing", "prefix_hash")


def host_address(value: Any) -> bool:
    """An IP address or a DNS name."""
    return isinstance(value, str) and (_ip(value) or re.fullmatch(
        r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
        value) is not None)


SCHEMA: dict[str, Key] = {
    # account and layout
    "sglang_home": Key("an absolute path", _abs_path, "use an absolute path such as '/opt/sglang'"),
    "sglang_uid": Key("None or an integer 1-65533", _optional(_int_range(1, 65533)),
                      "set a fixed numeric uid, e.g. sglang_uid = 990, or None to let useradd choose"),
    "sglang_gid": Key("None or an integer 1-65533", _optional(_int_range(1, 65533)),
                      "set a fixed numeric gid, e.g. sglang_gid = 990, or None to let groupadd choose"),
    "sglang_admins": Key("a list of distinct user names (not root or sglang)", _usernames,
                         "list existing login names, e.g. sglang_admins = ['alice']"),
    # docker engine
    "sglang_docker_source": Key("'distribution' or 'docker'", _one_of("distribution", "docker"),
                                "use 'distribution' (the OS packages) or 'docker' (Docker's apt repository)"),
    "sglang_docker_apt_url": Key("an https URL", _https_url,
                                 "use Docker's repository base URL, e.g. 'https://download.docker.com/linux'"),
    "sglang_docker_apt_key_fingerprint": Key("a full key fingerprint (40 hex digits)", _fingerprint,
                                             _FINGERPRINT_FIX + "'9DC858229FC7DD38854AE2D88D81803C0EBFCD88'"),
    "sglang_apt_cache_time": Key("an integer number of seconds >= 0", _int_range(0, 10**7),
                                 "use seconds, e.g. 86400"),
    # stack
    "sglang_image": Key("a pinned image reference", lambda v: image_problem(v) is None,
                        "pin a release tag such as 'lmsysorg/sglang:v0.5.16' or a digest '@sha256:...'"),
    "sglang_image_archive": Key("None or a path to an image archive on the control machine",
                                _optional(lambda v: isinstance(v, str) and os.path.isfile(v)),
                                "point at an existing `docker save` file, or None to pull from the registry"),
    "sglang_version": Key("None or the SGLang release the image carries, e.g. '0.5.16'",
                          _optional(lambda v: isinstance(v, str)
                                    and re.fullmatch(r"[0-9]+(\.[0-9]+)+(\.post[0-9]+)?", v) is not None),
                          "None to read it from sglang_image's tag (v0.5.16), or the release, e.g. '0.5.16', for a "
                          "mirror's tag that does not say it"),
    "sglang_extra_env": Key("a mapping of environment variable names to one-line strings, none of them one the "
                            f"deploy sets ({', '.join(DEPLOY_ENV)})", _env_mapping,
                            "use e.g. {'NCCL_P2P_DISABLE': '1'}"),
    "sglang_launch_args": Key("a mapping of SGLang flags ('--name') to {'value': ..., 'reason': ...}",
                              lambda v: isinstance(v, dict),
                              "use e.g. {'--chunked-prefill-size': {'value': 4096, 'reason': '...'}}"),
    "sglang_validate": Key("'on-change' or 'always'", _one_of("on-change", "always"),
                           "use 'on-change', or 'always' to validate on every run"),
    "sglang_ready_timeout": Key("an integer number of seconds 10-7200", _int_range(10, 7200),
                                "allow a model load, e.g. 600"),
    "sglang_benchmark_concurrency": Key("an integer 1-256", _int_range(1, 256), "use e.g. 8"),
    "sglang_benchmark_max_tokens": Key("an integer 1-32768", _int_range(1, 32768), "use e.g. 256"),
    "sglang_benchmark_min_fraction": Key("a number in (0, 1]", lambda v: _is_number(v) and 0 < v <= 1,
                                         "use a fraction such as 0.8"),
    "sglang_retry_failed": Key("True or False", lambda v: isinstance(v, bool),
                               "use True for one run to apply a config that failed its gate again"),
    "sglang_compose_template": Key("a template path relative to the project", lambda v: isinstance(v, str) and v != "",
                                   "name a file under templates/, e.g. 'templates/compose.yaml.j2'"),
    # models (entries and choices are judged by sglang_infra/models/registry.py)
    "sglang_models": Key("a mapping of registry keys to model entries", lambda v: isinstance(v, dict) and bool(v),
                         "keep the registry of group_data/all.py and add entries to it"),
    "sglang_denied_models": Key("a mapping of repo ids to {'failure', 'instead'}", lambda v: isinstance(v, dict),
                                "keep the denylist of group_data/all.py"),
    "sglang_model": Key("a registry key", lambda v: isinstance(v, str) and v != "",
                        "use a key of sglang_models, e.g. 'qwen3.6-35b-a3b-awq'"),
    "sglang_cached_models": Key("a list of registry keys",
                                lambda v: isinstance(v, (list, tuple)) and all(isinstance(k, str) for k in v),
                                "use e.g. ['qwen3.6-27b-awq-int4'], or []"),
    "sglang_hf_endpoint": Key("None or an http(s) URL", _optional(_http_url),
                              "use the mirror's base URL, e.g. 'https://hub.example.internal', or None for the Hub"),
    "sglang_api_key_file": Key("None or a readable file on the control machine",
                               _optional(_readable_file),
                               "point at a file holding only the API key, or None for an open API"),
    "sglang_hf_token_file": Key("None or a readable file on the control machine",
                                _optional(_readable_file),
                                "point at a file holding only the token, or None to use HF_TOKEN"),
    "sglang_prune_models": Key("True or False", lambda v: isinstance(v, bool),
                               "use True to remove unreferenced revisions, False to keep everything"),
    "sglang_pull_lock_wait": Key("an integer number of seconds 0-86400", _int_range(0, 86400),
                                 "use seconds, e.g. 1800"),
    "sglang_lock": Key("None or a file name (relative to the inventory's directory, or absolute)",
                       _optional(lambda v: isinstance(v, str) and v != "" and "\0" not in v),
                       "use 'sglang.lock' (written by scripts/lock.sh), or None to ignore any lock"),
    "sglang_pull_workers": Key("an integer 1-64", _int_range(1, 64),
                               "use e.g. 8; 1 fetches one file at a time over one connection"),
    "sglang_pull_min_free_mib": Key("an integer number of MiB 0-1048576", _int_range(0, 1 << 20),
                                    "use MiB, e.g. 1024; 0 lets a pull fill the disk to its last byte"),
    # peer distribution: the peer door (sglang_infra/plan/peerdoor.py; its key is judged in refusals.judge)
    "sglang_peer_port": Key("a TCP port 1-65535", _int_range(1, 65535), "use e.g. 880"),
    "sglang_peer_bind_address": Key("None or an IP address of the fleet's network (not loopback, not every address)",
                                    _optional(_fleet_ip),
                                    "use the address the fleet's other hosts reach this host on, or None for its "
                                    "fleet address"),
    "sglang_peer_key_file": Key("None or a readable file on the control machine",
                                _optional(_readable_file),
                                "point at a file holding only the site's peer key, or None for no peer door"),
    "sglang_tools_dir": Key("an absolute path outside sglang_home", _abs_path,
                            "use e.g. '/var/lib/sglang-tools'"),
    "sglang_huggingface_hub_version": Key("a release such as '2.4.0'", _release,
                                          "pin the release, e.g. '2.4.0'"),
    # toolchain image (combinations are judged by sglang_infra/machine/toolchain/)
    "sglang_toolchain_image": Key("True or False", lambda v: isinstance(v, bool),
                                  "use True to serve the pinned toolchain image, False to serve sglang_image as is"),
    "sglang_flashinfer_version": Key("a release such as '0.6.14'", lambda v: isinstance(v, str) and v != "",
                                     "use e.g. '0.6.14'"),
    "sglang_flashinfer_versions": Key("a mapping of flashinfer package names to versions",
                                      lambda v: isinstance(v, dict), "use {} unless all three move together"),
    "sglang_cuda_flavor": Key("a CUDA flavour such as 'cu130'", lambda v: isinstance(v, str) and v != "",
                              "use e.g. 'cu130'"),
    "sglang_image_cuda_flavor": Key("a CUDA flavour such as 'cu130'", lambda v: isinstance(v, str) and v != "",
                                    "use the flavour the SGLang image is built for, e.g. 'cu130'"),
    "sglang_nvcc_version": Key("a release such as '13.3.73'", lambda v: isinstance(v, str) and v != "",
                               "use a nvidia-cuda-nvcc release, e.g. '13.3.73'"),
    "sglang_pip_index_url": Key("None or an http(s) URL", _optional(_http_url),
                                "use your index's simple URL, or None for pip's default"),
    "sglang_flashinfer_index_url": Key("None or an http(s) URL whose only placeholder is {cuda_flavor}", _index_url,
                                       "use flashinfer's wheel index, e.g. 'https://flashinfer.ai/whl/{cuda_flavor}'"),
    "sglang_extra_ca_bundle": Key("None or a path to a PEM file on the control machine",
                                  _optional(lambda v: isinstance(v, str) and v != ""),
                                  "point at a PEM bundle, or None"),
    "sglang_port": Key("a TCP port 1-65535", _int_range(1, 65535), "use a port number such as 30000"),
    "sglang_bind_address": Key("an IP address", _ip, "use '0.0.0.0' for every interface or '127.0.0.1'"),
    "sglang_trusted_network": Key("True or False", lambda v: isinstance(v, bool),
                                  "use False, or True only on a network where everyone who reaches a port may call it"),
    "sglang_gpus": Key("'all' or a GPU count 1-64", _gpus, "use 'all' or the number of GPUs to reserve"),
    "sglang_require_gpu": Key("True or False", lambda v: isinstance(v, bool),
                              "use True for real servers; False only for a stand-in sandbox"),
    "sglang_install_nvidia_toolkit": Key("True or False", lambda v: isinstance(v, bool), "use True or False"),
    "sglang_install_fabric_manager": Key("True or False", lambda v: isinstance(v, bool), "use True or False"),
    "sglang_enable_persistence": Key("True or False", lambda v: isinstance(v, bool), "use True or False"),
    "sglang_nvidia_driver_version": Key("None or a full driver version such as '580.105.08'",
                                        _optional(lambda v: isinstance(v, str)
                                                  and re.fullmatch(r"[1-9]\d{2}\.\d{1,3}\.\d{1,3}", v) is not None),
                                        "pin the full version nvidia-smi shows, e.g. '580.105.08' "
                                        "(apt-cache madison lists them), or None to leave the driver alone"),
    "sglang_nvidia_driver_open": Key("True or False", lambda v: isinstance(v, bool),
                                     "use True (open kernel modules, Turing and newer) or False (Volta and older)"),
    "sglang_allow_reboot": Key("True or False", lambda v: isinstance(v, bool),
                               "use True to let the deploy reboot a host to load its new driver, or False"),
    "sglang_nvidia_cuda_apt_url": Key("an https URL", _https_url, "use NVIDIA's CUDA repository base URL"),
    "sglang_nvidia_cuda_apt_key_fingerprint": Key("None or a full key fingerprint (40 hex digits)",
                                                  _optional(_fingerprint),
                                                  _FINGERPRINT_FIX + "'EB693B3035CD5710E231E123A4B469963BF863CC', "
                                                  "or None for NVIDIA's own key"),
    "sglang_nvidia_toolkit_apt_key_fingerprint": Key("a full key fingerprint (40 hex digits)", _fingerprint,
                                                     _FINGERPRINT_FIX + "'C95B321B61E88C1809C4F759DDCAE044F796ECB0'"),
    "sglang_nvidia_toolkit_apt_url": Key("an https URL", _https_url,
                                         "use NVIDIA's repository base URL, "
                                         "e.g. 'https://nvidia.github.io/libnvidia-container'"),
    "sglang_healthcheck_start_period": Key("an integer number of seconds 60-7200", _int_range(60, 7200),
                                           "allow a model load, e.g. 900"),
    "sglang_debug_logging": Key("True or False", lambda v: isinstance(v, bool),
                                "use True to enable the three debug flags, False to keep them commented"),
    # multi-node groups (the group's own rules are in nodegroups.py)
    "sglang_node_group": Key("None or a group name (letters, digits, '.', '_', '-'; at most 63)",
                             _optional(lambda v: isinstance(v, str)
                                       and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", v) is not None),
                             "name the group, e.g. sglang_node_group = 'ds-a', or None for a host that serves alone"),
    "sglang_dist_init_port": Key("a TCP port 1024-65535", _int_range(1024, 65535), "use e.g. 29500"),
    "sglang_dist_init_ports": Key("an integer 7-1024", _int_range(7, 1024),
                                  "use e.g. 16: the rendezvous port and SGLang's 6 ZMQ ports above it at least"),
    "sglang_node_interface": Key("None or a network interface name", _optional(
        lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,14}", v) is not None),
        "name the interface the members reach each other on, e.g. 'eth1', or None"),
    # fleet front door (the router group; the fleet's rules are in gateways.check_fleet)
    "sglang_worker_address": Key("None or an IP address or DNS name", _optional(host_address),
                                 "use the address the gateway hosts reach this host on, e.g. '10.0.0.11', or None"),
    "sglang_router_image": Key("None or a pinned image reference", _optional(lambda v: image_problem(v) is None),
                               "name the SMG gateway image by digest (repo@sha256:...) or by a release tag"),
    "sglang_router_image_archive": Key("None or a readable file on the control machine",
                                       _optional(_readable_file),
                                       "point at a `docker save` archive of sglang_router_image, or None to pull it"),
    "sglang_router_admin_key_file": Key("None or a readable file on the control machine",
                                        _optional(_readable_file),
                                        "point at a file holding only the gateway's control-plane key"),
    "sglang_router_models": Key("None or a list of distinct registry keys",
                                _optional(lambda v: isinstance(v, (list, tuple)) and bool(v)
                                          and all(isinstance(k, str) and k for k in v) and len(set(v)) == len(v)),
                                "use e.g. ['qwen3.6-35b-a3b-awq'], or None for every served model"),
    "sglang_router_policy": Key(f"one of {', '.join(GATEWAY_POLICIES)} (SMG {GATEWAY_VERSION}'s policies)",
                                _one_of(*GATEWAY_POLICIES), "use 'cache_aware'"),
    "sglang_router_bind_address": Key("None or an IP address", _optional(_ip),
                                      "use None, the address clients reach this host on, or '127.0.0.1'"),
    "sglang_router_prometheus_bind_address": Key("an IP address", _ip,
                                                 "use '127.0.0.1', or the address your scraper reaches"),
    "sglang_router_port": Key("a TCP port 1-65535", _int_range(1, 65535), "use a port number such as 30080"),
    "sglang_router_prometheus_port": Key("a TCP port 1-65535", _int_range(1, 65535),
                                         "use a port number such as 29000"),
    "sglang_router_health_check_interval": Key("an integer number of seconds 1-3600", _int_range(1, 3600),
                                               "use e.g. 5"),
    "sglang_router_health_check_timeout": Key("an integer number of seconds 1-600", _int_range(1, 600),
                                              "use e.g. 3, below sglang_router_health_check_interval"),
    "sglang_router_health_failure_threshold": Key("an integer 1-100", _int_range(1, 100), "use e.g. 2"),
    "sglang_router_health_success_threshold": Key("an integer 1-100", _int_range(1, 100), "use e.g. 1"),
    "sglang_router_request_timeout": Key("an integer number of seconds 1-86400", _int_range(1, 86400),
                                         "use e.g. 1800"),
    "sglang_enable_metrics": Key("True or False", lambda v: isinstance(v, bool), "use True or False"),
    "sglang_drain_timeout": Key("an integer number of seconds 1-86400", _int_range(1, 86400),
                                "use a positive number of seconds, e.g. 300"),
    "sglang_max_unavailable": Key("an integer 1-1000, or a share of the pool's workers from \"1%\" to \"99%\"",
                                  lambda v: _int_range(1, 1000)(v) or (isinstance(v, str) and bool(_SHARE_RE.match(v))),
                                  "use e.g. 1, or \"25%\" (a share is rounded down and never below 1; \"100%\" and 0 "
                                  "would leave a pool's gateways no worker, or stop no worker at all)"),
    "sglang_router_worker_startup_timeout": Key("an integer number of seconds 1-7200", _int_range(1, 7200),
                                                "use e.g. 120"),
    # fleet metrics: the node exporter on every host, Prometheus on the monitor group (monitoring.check_monitor)
    "sglang_node_exporter": Key("True or False", lambda v: isinstance(v, bool), "use True or False"),
    "sglang_node_exporter_bind_address": Key("an IP address", _ip,
                                             "use '127.0.0.1', or the address the monitor hosts reach this host on"),
    "sglang_node_exporter_port": Key("a TCP port 1-65535", _int_range(1, 65535), "use e.g. 9100"),
    "sglang_prometheus_listen_address": Key("an 'address:port' with an IP address ('[v6]:port' for IPv6)",
                                            lambda v: listen_address(v) is not None,
                                            "use e.g. '127.0.0.1:9090' or '10.0.0.5:9090'"),
    "sglang_prometheus_retention": Key("a Prometheus duration such as '15d' or '12h'", _duration, "use e.g. '15d'"),
    "sglang_prometheus_scrape_interval": Key("a Prometheus duration such as '15s'", _duration, "use e.g. '15s'"),
    "sglang_alert_down_for": Key("a Prometheus duration such as '2m'", _duration, "use e.g. '2m'"),
    "sglang_alert_throughput_fraction": Key("a number in (0, 1]", lambda v: _is_number(v) and 0 < v <= 1,
                                            "use a fraction such as 0.5"),
    "sglang_alert_queue_depth": Key("an integer 1-1000000", _int_range(1, 1_000_000), "use e.g. 16"),
    "sglang_alert_queue_for": Key("a Prometheus duration such as '10m'", _duration, "use e.g. '10m'"),
    "sglang_alert_disk_free_fraction": Key("a number in (0, 1)", lambda v: _is_number(v) and 0 < v < 1,
                                           "use a fraction such as 0.1"),
    "sglang_alert_config_for": Key("a Prometheus duration such as '15m'", _duration, "use e.g. '15m'"),
    # launch flags
    "sglang_dtype": Key(f"'derive', None or one of {', '.join(DTYPES)}", _optional(_one_of(DERIVE, *DTYPES)),
                        "use 'derive', 'float16' for AWQ/Marlin before SM90, or None for the model's own dtype"),
    "sglang_mamba_conv_dtype": Key("'derive', None, 'float16', 'bfloat16' or 'float32'",
                                   _optional(_one_of(DERIVE, "float16", "bfloat16", "float32")),
                                   "use 'derive', or 'float16' together with sglang_dtype = 'float16'"),
    "sglang_mamba_full_memory_ratio": Key("None or a number in (0, 1]",
                                          _optional(lambda v: _is_number(v) and 0 < v <= 1),
                                          "use a fraction such as 0.9"),
    "sglang_mem_fraction_static": Key("None or a number in (0, 1)",
                                      _optional(lambda v: _is_number(v) and 0 < v < 1),
                                      "use a fraction such as 0.85"),
    "sglang_allow_auto_truncate": Key("True or False", lambda v: isinstance(v, bool), "use True or False"),
    "sglang_disable_custom_all_reduce": Key("'derive', True or False", lambda v: v == DERIVE or isinstance(v, bool),
                                            "use 'derive', True or False"),
    "sglang_cuda_graph_backend_prefill": Key("None or a backend name", _optional(_flag_word),
                                             "use 'disabled', or None to keep SGLang's default"),
    "sglang_context_length": Key("None or an integer 1-10000000", _optional(_int_range(1, 10_000_000)),
                                 "use the model's context length, e.g. 262144"),
    "sglang_tp_size": Key("'derive' or an integer 1-64", lambda v: v == DERIVE or _int_range(1, 64)(v),
                          "use 'derive' or the number of GPUs to split the model across"),
}


# Keys this project no longer reads, each with the key that took its place: refused in one line naming the new one,
# so an inventory that still sets the old one never silently falls back to the new one's default.
RETIRED: dict[str, str] = {
    "sglang_router_trusted_network": "sglang_trusted_network",
}
