"""Nothing changes on a host that cannot finish (issue 58): every source a host's plan will fetch from is asked
from that host, in the preflight, before any command runs anywhere.

`fetched(plan, snapshot)` names the sources this run's plan of a host fetches from, and only those: Docker's apt
repository when the engine is installed from it, NVIDIA's Container Toolkit repository when the toolkit is
installed, NVIDIA's CUDA repository when a pinned driver is installed from it (Debian), the Hub (or its mirror)
when a kept model is not complete in the cache and no peer holds it for the host, the package index
(sglang_pip_index_url, when set; unset, the host's own pip configuration decides) when the pull's venv or the
toolchain image is (re)built. A settled or converged host fetches nothing, so it is asked nothing: the check costs
a remote command only on a run that would fetch.

`refusals(hosts, plans, snapshots)` asks each such host at once (hostside/read/reach.py, one command, every URL
in parallel, each bounded by TIMEOUT seconds) and returns a refusal per source that did not answer, naming the
host, the URL, the key that sets it and the fix. Any HTTP answer counts (the server is there): apt, pip and the
pull say their own errors later, as before.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Mapping

import gevent
from pyinfra.api import FactBase

from ..hostside.names import TOOLCHAIN_INPUTS_LABEL
from ..machine import ship
from ..plan.problems import problem
from ..plan.types import HostPlan
from . import factcache

TIMEOUT = 5   # seconds for each source's connection and first answer line (the whole check: about this long)


@dataclass(frozen=True)
class Source:
    url: str
    key: str      # the data key that sets it
    what: str     # what it is, for the refusal


def revision_complete(cache: Mapping[str, Any] | None, repo_id: str, revision: str,
                      content: str | None = None) -> bool:
    """The cache (the snapshot's models section) holds ``repo_id`` at ``revision`` complete and verified, and with
    ``content`` (the lock's digest) verified against it."""
    for found_id, repo in ((cache or {}).get("repos") or {}).items():
        if found_id.lower() == repo_id.lower():
            found = (repo.get("revisions") or {}).get(revision) or {}
            return bool(found.get("complete")) and (content is None or found.get("content") == content)
    return False


def _hub(plan: HostPlan) -> str:
    from huggingface_hub import constants  # the client's own default endpoint, as the pull's is

    return plan.pull.hf_endpoint or constants.ENDPOINT


def fetched(plan: HostPlan, snapshot: Mapping[str, Any]) -> list[Source]:
    """The sources this host's plan fetches from in this run (see the module's docstring)."""
    found = []
    engine = plan.engine
    if (plan.serves or plan.runs_gateways) and engine.repo is not None:
        found.append(Source(engine.repo.key_url, "sglang_docker_apt_url", "Docker's apt repository"))
    if plan.serves and engine.toolkit is not None:
        found.append(Source(engine.toolkit.key_url, "sglang_nvidia_toolkit_apt_url",
                            "NVIDIA's Container Toolkit repository"))
    if not plan.serves:
        return found
    driver = plan.driver
    if driver.pin and driver.repo is not None and plan.gpus.driver.version != driver.pin:
        found.append(Source(driver.repo.key_url, "sglang_nvidia_cuda_apt_url", "NVIDIA's CUDA repository"))
    cache = snapshot.get("models")
    missing = [m for m in plan.kept if not revision_complete(
        cache, m.repo_id, m.revision, plan.locked[m.key].content if m.key in plan.locked else None)]
    if missing and not plan.peer_sources:
        found.append(Source(_hub(plan), "sglang_hf_endpoint", f"the Hub ({missing[0].repo_id} is not in the cache)"))
    tools = snapshot.get("tools") or {}
    image = plan.image.build
    builds = image is not None and ((((snapshot.get("docker") or {}).get("images") or {}).get(image.tag) or {})
                                    .get("labels") or {}).get(TOOLCHAIN_INPUTS_LABEL) != image.inputs_hash
    if plan.pull.index_url and (tools.get("hub_versions") != [plan.pull.hub_version] or builds):
        found.append(Source(plan.pull.index_url, "sglang_pip_index_url", "the package index"))
    return found


class SourcesAnswer(FactBase):
    """Each URL mapped to None (it answered) or why not, asked from the host (hostside/read/reach.py)."""

    program = "read.reach"

    @classmethod
    def sources(cls) -> str:
        """What the host is sent on stdin when its code cache lacks the program (factcache.read)."""
        return ship.cached_sources(cls.program)

    def command(self, spec: str):
        return f"{ship.cached_command(self.program)} {shlex.quote(spec)}"

    def process(self, output):
        if ship.missed(output):
            return factcache.Missed
        return json.loads("\n".join(output))


def ask(host, urls: list[str]) -> dict[str, str | None] | None:
    """Each of ``urls`` mapped to None (it answered from ``host``) or why not; None when the host did not run the
    check."""
    return factcache.read(host, SourcesAnswer, spec=json.dumps({"urls": urls, "timeout": TIMEOUT}, sort_keys=True))


def refusals(hosts, plans: Mapping[str, HostPlan | None], snapshots: Mapping[str, Any]) -> list[str]:
    """A refusal for each source a host's plan fetches from that does not answer from that host."""
    asked = []
    for each in hosts:
        plan = plans.get(each.name)
        sources = fetched(plan, snapshots.get(each.name) or {}) if plan is not None else []
        if sources:
            asked.append((each, sources, gevent.spawn(ask, each, sorted({s.url for s in sources}))))
    gevent.joinall([job for _, _, job in asked], timeout=4 * TIMEOUT + 30)
    found = []
    for each, sources, job in asked:
        answers = job.value if job.successful() and isinstance(job.value, dict) else None
        for source in sources:
            why = "the host did not answer the check" if answers is None else answers.get(source.url, "not asked")
            if why is not None:
                found.append(problem(each.name, source.key, f"{source.what} at {source.url} does not answer from "
                                     f"this host ({why}); the run would stop after changing it",
                                     f"make {source.url} reachable from the host, or set {source.key} to a mirror "
                                     "it reaches"))
    return found

