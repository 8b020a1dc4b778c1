"""The gate the deploy runs after every change to the stack (gate.sh wraps it).

1. wait until the server is ready (/health, then a real completion), at most
   --ready-timeout seconds, stopping early when the container exits;
2. with --toolchain-check, run it inside the running container;
3. run test_tool_calling.sh and benchmark.sh as they are on disk;
4. pass: keep compose.yaml and .env as the last known-good config (*.good)
   and stamp what passed (stamp.py);
   fail: keep them as *.failed, restore the last known-good config, recreate,
   validate again, and exit non-zero saying so (1: rolled back, 2: the
   rollback failed too and the host needs a person).
   With --config-sha, the gate judges only the config its run rendered: a
   compose.yaml of another sha256, before or after the checks, is judged,
   recorded and rolled back by nobody here (exit 4).
Either way, the outcome is recorded in docker/.last-gate (stamp.LAST): when,
pass or fail and why, whether test_tool_calling.sh passed, and the benchmark's
figures (scripts/status.sh); a worker's gate then writes its metrics for the
node exporter (gate_metrics.py).

With --gateway SLUG the same gate validates a gateway (the `router` group):
its stack, scripts, stamp and record are in router/SLUG/ below the home, the
checks run through it, and a rollback restores its compose.yaml (its worker
set, workers.json, is the fleet's and is never rolled back).
"""

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

from .. import apikey, checks, names, safefs, stack
from ..gpu import nvsmi
from ..printable import printable
from . import gate_metrics, stamp
from .goodcopy import CONFIG, MAX_CONFIG, copy

LOG_LINES = 40  # of the server's log, shown when it never became ready
# Beyond the readiness wait: both checks bound their own requests at 300 s (checks.py), the toolchain check and
# compose's own commands take seconds. The gate as a whole ends within --ready-timeout plus this.
CHECKS_BUDGET = 900
COMMAND_TIMEOUT = 120
# The kernel check's answer from the container: one JSON object of a line per GPU; more is no report (a container
# that prints megabytes is stopped there), and what it says is shown at most KERNEL_SAID_CHARS long.
KERNEL_REPORT_BYTES = 64 << 10
KERNEL_SAID_CHARS = 1000
# benchmark.sh's summary fields kept in the gate's record.
BENCHMARK_FIELDS = ("time", "tok_per_s", "baseline_tok_per_s", "ratio_to_baseline", "avg_spec_accept_length",
                    "min_accept_length", "ok", "result_file")


def say(line):
    """One line for the operator (and CI): without the API key, whatever the server logged or answered, and
    with control characters escaped in what came from the server or its container."""
    print(f"gate[{socket.gethostname()}]: {printable(apikey.redact(line))}", file=sys.stderr, flush=True)




class Gate:
    def __init__(self, args):
        self.args = args
        self.home = args.home
        self.benchmark = None   # benchmark.sh's summary in the last validate(), if it got that far
        self.tool_call_ok = None   # whether test_tool_calling.sh passed in the last validate(); None: never ran
        self.stamped = None   # the container stamp() last stamped (its id and start), for the record
        gateway = getattr(args, "gateway", None)   # gate.sh always passes it; a caller of Gate may not
        self.gateway = gateway
        if gateway:
            self.docker_dir = self.scripts_dir = os.path.join(args.home, names.GATEWAY_DIR, gateway)
            self.project, self.service = stack.gateway(gateway)
            self.extra = stamp.GATEWAY_FILES
        else:
            self.docker_dir, self.scripts_dir = os.path.join(args.home, names.DOCKER_DIR), args.home
            self.project, self.service, self.extra = stack.PROJECT, stack.SERVICE, ()

    def config(self, suffix=""):
        return [os.path.join(self.docker_dir, name + suffix) for name in CONFIG
                if name == names.COMPOSE_FILE or os.path.lexists(os.path.join(self.docker_dir, name))]

    def compose(self, *words):
        try:
            return subprocess.run([*names.COMPOSE_COMMAND, *words], cwd=self.docker_dir, capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(words, 124, "", f"docker compose {words[0]} took over "
                                                               f"{COMMAND_TIMEOUT} s")

    def gone(self):
        found = stack.container(self.project, self.service)
        if found is None or found["state"] != "running":
            return f"the container is not running ({found['status'] if found else 'no container'})"
        if apikey.loaded() and not stack.holds(self.args.url, self.project, self.service):
            return f"the container does not publish {self.args.url}; the API key is sent to no other port"
        return None

    def validate(self):
        """None when everything passed, else the reason."""
        self.benchmark = self.tool_call_ok = None
        ready = checks.wait_ready(self.args.url, self.args.model, self.args.ready_timeout, gone=self.gone)
        if not ready["ok"]:
            say(f"ready FAILED: {'; '.join(ready['problems'])}")
            say("the server did not become ready; last lines of its log:")
            logs = self.compose("logs", "--no-color", "--tail", str(LOG_LINES))
            for line in (logs.stdout + logs.stderr).splitlines():
                say(f"| {line}")
            return "the server did not become ready"
        if self.args.toolchain_check:
            # The pins inside the running container: flashinfer's three versions and nvcc.
            found = self.compose("exec", "-T", self.service, *self.args.toolchain_check.split())
            if found.returncode != 0:
                last = (found.stdout + found.stderr).strip().splitlines()[-1:] or ["no output"]
                reason = f"toolchain check in the running container: {last[0]}"
                say(reason)
                return reason
            say("toolchain check passed")
        kernel_program = getattr(self.args, "kernel_check_program", None)
        if kernel_program:
            reason = self.kernel_check(kernel_program)
            if reason:
                say(reason)
                return reason
        deadline = time.monotonic() + CHECKS_BUDGET
        for script in names.VALIDATION_SCRIPTS:
            try:
                found = subprocess.run(["bash", os.path.join(self.scripts_dir, script)], capture_output=True, text=True,
                                       timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                if script == names.VALIDATION_SCRIPTS[0]:
                    self.tool_call_ok = False
                reason = f"{script}: did not finish within the gate's {CHECKS_BUDGET} s for the checks"
                say(reason)
                return reason
            if script == names.VALIDATION_SCRIPTS[0]:
                self.tool_call_ok = found.returncode == 0
            lines = (found.stdout + found.stderr).strip().splitlines()
            summary = [line for line in lines if line.startswith("{")][-1:]
            if script == names.VALIDATION_SCRIPTS[1] and summary:
                self.benchmark = benchmark_fields(summary[0])
            if found.returncode != 0:
                reason = f"{script}: {([line for line in lines if not line.startswith('{')][-1:] or ['no output'])[0]}"
                say(reason)
                return reason
            say(f"{script} passed: {summary[0] if summary else ''}")
        return None

    def kernel_check(self, program):
        """gpu_kernel_check.py inside the running container, with the image's pinned nvcc: a kernel compiled for
        the GPUs' architecture runs on every GPU the container sees, its result checked. The reason, or None."""
        found = self.compose_bounded(KERNEL_REPORT_BYTES, "exec", "-T", self.service, "python3", "-I", "-c", program,
                                     "--nvcc", self.args.kernel_check_nvcc)
        report, why = kernel_report(found.stdout)
        if report is None:
            last = [why] if found.stdout.strip() else found.stderr.strip().splitlines()[-1:] or [why]
            return f"CUDA kernel check in the running container: {printable(last[0])[:KERNEL_SAID_CHARS]}"
        if report["ok"] is not True:
            return f"CUDA kernel check in the running container: {report['said']}"
        say(f"CUDA kernel check passed: {report['said']}")
        return None

    def not_own(self):
        """None when compose.yaml is the config the run that started this gate rendered (--config-sha), or no run
        said which; else why the gate must not judge it: another run (or a hand) changed the host meanwhile."""
        wanted = getattr(self.args, "config_sha", None)
        if not wanted:
            return None
        try:
            content, _ = safefs.read_with_stat(os.path.join(self.docker_dir, names.COMPOSE_FILE), MAX_CONFIG)
        except OSError as error:
            return f"compose.yaml could not be read ({error})"
        found = hashlib.sha256(content).hexdigest()
        if found != wanted:
            return (f"compose.yaml on this host (sha256 {found[:12]}) is not the config this run rendered "
                    f"({wanted[:12]}): another run changed it")
        return None

    def compose_bounded(self, limit, *words):
        """compose(*words), each of its outputs read at most ``limit`` bytes: a command that prints more is
        killed there (its output cut at ``limit`` + 1 bytes), as one that runs past COMMAND_TIMEOUT."""
        try:
            process = subprocess.Popen([*names.COMPOSE_COMMAND, *words], cwd=self.docker_dir,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as error:
            return subprocess.CompletedProcess(words, 127, "", str(error))
        outputs = {}

        def drain(name, stream):
            data = b""
            while len(data) <= limit:
                chunk = stream.read(min(65536, limit + 1 - len(data)))
                if not chunk:
                    break
                data += chunk
            outputs[name] = data
            if len(data) > limit:
                process.kill()

        readers = [threading.Thread(target=drain, args=(name, stream), daemon=True)
                   for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))]
        for reader in readers:
            reader.start()
        try:
            code = process.wait(timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            code = 124
            outputs.setdefault("stderr", f"docker compose {words[0]} took over {COMMAND_TIMEOUT} s".encode())
        for reader in readers:
            reader.join(timeout=5)
        return subprocess.CompletedProcess(words, code, outputs.get("stdout", b"").decode("utf-8", "replace"),
                                           outputs.get("stderr", b"")[-limit:].decode("utf-8", "replace"))

    def keep(self, suffix):
        for path in self.config():
            copy(path, path + suffix)
        if suffix == ".good" and not self.gateway:
            self.keep_gpus()

    def is_last_good(self):
        """Whether the config is its last known-good copy byte for byte (False where either cannot be read)."""
        try:
            return all(safefs.read_with_stat(path, MAX_CONFIG)[0] == safefs.read_with_stat(path + ".good",
                                                                                          MAX_CONFIG)[0]
                       for path in self.config())
        except OSError:
            return False

    def keep_gpus(self):
        """A worker's GPUs as nvidia-smi lists them now, kept beside its *.good config (nvsmi.GATED_FILE): the
        plan this config passed on. Nothing is kept without nvidia-smi (a stand-in sandbox)."""
        try:
            listed = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, check=True,
                                    timeout=COMMAND_TIMEOUT)
            text = nvsmi.gated(nvsmi.parse(listed.stdout))
        except (OSError, subprocess.SubprocessError, ValueError):
            return
        stack.write_private(os.path.join(self.docker_dir, nvsmi.GATED_FILE), text,
                            os.path.join(self.docker_dir, names.COMPOSE_FILE))

    def stamp(self):
        found = stack.container(self.project, self.service)
        stack.write_private(os.path.join(self.docker_dir, stamp.STAMP),
                            stamp.digest(self.scripts_dir, found, self.docker_dir, self.extra) + "\n",
                            os.path.join(self.docker_dir, names.COMPOSE_FILE))
        self.stamped = {key: (found or {}).get(key) for key in stamp.GATED_CONTAINER}

    def record(self, failed, benchmark, rolled_back=None, tool_call_ok=None):
        """The outcome in docker/.last-gate, for the status report and the metrics: ``benchmark`` (benchmark.sh's
        summary) and ``tool_call_ok`` (whether test_tool_calling.sh passed; None: it never ran) are of the config
        the gate tried. A failure to write it fails nothing."""
        text = apikey.redact(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                         "passed": failed is None, "reason": failed, "rolled_back": rolled_back,
                                         "tool_call_ok": tool_call_ok, "benchmark": benchmark,
                                         "container": self.stamped, "boot_id": stamp.boot_id()}, sort_keys=True))
        try:
            stack.write_private(os.path.join(self.docker_dir, stamp.LAST), text + "\n",
                                os.path.join(self.docker_dir, names.COMPOSE_FILE))
        except OSError as error:
            say(f"could not record the outcome in {stamp.LAST} ({error})")

    def run(self):
        """The gate's exit code; a worker's gate then writes its metrics, whatever the outcome."""
        try:
            return self.decide()
        finally:
            if not self.gateway:
                self.write_metrics()

    def write_metrics(self):
        """The outcome for the node exporter now, not at the timer's next minute. Any failure is said and fails
        nothing: the metrics report the gate, they are no part of it."""
        try:
            gate_metrics.write(self.home)
        except Exception as error:   # whatever it is, the gate's outcome stands
            say(f"could not write the gate's metrics ({error})")

    def decide(self):
        step = getattr(self.args, "group_step", None)
        if step in ("keep", "failed"):
            other = self.not_own()
            if other is not None:
                say(f"FAILED: {other}; this member kept nothing as good or failed and put nothing back")
                return NOT_OWN
            return self.keep_member() if step == "keep" else self.fail_member()
        if step == "rolled-back":
            return self.validate_rolled_back()
        other = self.not_own()
        if other is None:
            failed = self.validate()
            other = self.not_own()
        if other is not None:
            say(f"FAILED: {other}; this gate judged nothing, recorded nothing and rolled nothing back")
            return NOT_OWN
        # What the config tried did in its checks: the record keeps it even when a rollback validates again.
        tried, tool_call_ok = self.benchmark, self.tool_call_ok
        if failed is None:
            try:
                self.keep(".good")
            except OSError as error:
                say(f"FAILED: the checks passed, but the known-good copy could not be saved ({error}); "
                    "nothing was stamped, the previous known-good config is kept")
                self.record(f"the known-good copy could not be saved ({error})", tried,
                            tool_call_ok=tool_call_ok)
                return 1
            self.stamp()
            self.record(None, tried, tool_call_ok=tool_call_ok)
            say("passed; this config is now the last known-good one")
            return 0
        if step == "revalidate":
            # a multi-node group's rank 0, every member's config its last known-good one: the group's state failed
            say(f"FAILED: {failed}. {GROUP_STATE_FAILED}")
            self.record(failed, tried, tool_call_ok=tool_call_ok)
            return GROUP_FAILED
        # A config that is its own last known-good copy (restarted as it was: a container gone, a host rebooted)
        # failed through the host's state, not as a config: kept as *.failed, the next run would refuse the good
        # config itself (operations/gate.py not_failed_before). It is recreated and validated once more below.
        last_good = step is None and self.is_last_good()
        try:
            if not last_good:
                self.keep(names.FAILED_SUFFIX)
        except OSError as error:
            say(f"could not keep the failed config as *.failed ({error})")
        if step == "validate":
            # a multi-node group's rank 0: the group's operation rolls every member back at once (operations/group.py)
            say(f"FAILED: {failed}. {GROUP_NOT_ROLLED_BACK}")
            self.record(failed, tried, tool_call_ok=tool_call_ok)
            return GROUP_FAILED
        good = [path + ".good" for path in self.config()]
        if not all(os.path.lexists(path) for path in good):
            say(f"FAILED: {failed}. No known-good config to roll back to (first deploy); the stack is left as it is")
            self.record(failed, tried, tool_call_ok=tool_call_ok)
            return 1
        say(f"FAILED: {failed}. Rolling back to the last known-good config")
        try:
            for path in good:
                copy(path, path[: -len(".good")])
        except OSError as error:
            say(f"FAILED: {failed}. The known-good config could not be restored ({error}); the host needs a person")
            self.record(failed, tried, rolled_back=False, tool_call_ok=tool_call_ok)
            return 2
        # The failed config serves nobody: stopped at once, not drained (a hung server would hold the stop for
        # the whole stop_grace_period); the readiness wait of the good config starts when it is gone.
        self.compose("stop", "--timeout", str(stack.QUICK_STOP_SECONDS))
        self.compose("up", "-d", "--force-recreate", "--remove-orphans")
        stack.record(self.docker_dir, self.project, self.service)
        again = self.validate()
        if again is None:
            self.stamp()
        self.record(failed, tried, rolled_back=again is None, tool_call_ok=tool_call_ok)
        if again is None and last_good:
            say(f"FAILED: {failed}. This config is the last known-good one (nothing is kept as *.failed); "
                "recreated, it serves and validates again")
            return 1
        if again is None:
            say(f"FAILED: {failed}. Rolled back to the last known-good config, which serves and validates again; "
                "the failed config is kept as compose.yaml.failed and .env.failed")
            return 1
        same = " (this config is the last known-good one: nothing is kept as *.failed)" if last_good else ""
        say(f"FAILED: {failed}. The rollback to the last known-good config ALSO failed ({again}){same}; "
            "the host needs a person")
        return 2


    def validate_rolled_back(self):
        """A multi-node group's rank 0 once every member is back on its last good config and started again: that
        config validated again and stamped; the record keeps that the group's new config failed (a pass here is
        the rollback's, not the new config's). 0 when it serves again, 2 when the rollback failed too."""
        failed = "the group's new config failed its gate (kept as compose.yaml.failed); rolled back"
        again = self.validate()
        if again is None:
            self.stamp()
        self.record(failed, None, rolled_back=again is None)
        if again is None:
            say("the group's last known-good config serves and validates again")
            return 0
        say(f"FAILED: the rollback to the group's last known-good config ALSO failed ({again}); the group needs a "
            "person")
        return 2

    def keep_member(self):
        """A multi-node group's member (rank >= 1) once rank 0's gate passed: its config is the group's last
        known-good one, stamped as it runs. Its own health answers are never asked: only rank 0's say whether the
        group works."""
        try:
            self.keep(".good")
        except OSError as error:
            say(f"FAILED: the group's gate passed, but the known-good copy could not be saved ({error})")
            return 1
        self.stamp()
        self.record(None, None)
        say("passed through the group's rank 0; this config is now the last known-good one")
        return 0

    def fail_member(self):
        """A multi-node group's member after rank 0's gate failed: its config kept as *.failed and the last
        known-good one put back on disk (the group's operation then restarts every member from it). 1 when there
        is none (a first deploy): the member is left as it is."""
        try:
            self.keep(names.FAILED_SUFFIX)
        except OSError as error:
            say(f"could not keep the failed config as *.failed ({error})")
        good = [path + ".good" for path in self.config()]
        if not all(os.path.lexists(path) for path in good):
            say("the group's gate failed; no known-good config to roll back to (first deploy)")
            return 1
        try:
            for path in good:
                copy(path, path[: -len(".good")])
        except OSError as error:
            say(f"the known-good config could not be restored ({error}); the host needs a person")
            return 2
        say("the group's gate failed; the last known-good config is back on disk")
        return 0


# compose.yaml is not the config the run that started the gate rendered: nothing judged, recorded or rolled back.
NOT_OWN = 4
# gate.py --group-step validate: the checks failed and nothing was rolled back (the group's operation does that):
# its exit code, and the words that end its FAILED line.
GROUP_FAILED = 3
GROUP_NOT_ROLLED_BACK = "Not rolled back here: the group's members are rolled back together"
# gate.py --group-step revalidate (the group recreated with every member's config unchanged): a failure is the
# group's state, not a config's; nothing is kept as *.failed and nothing is rolled back (it is the good config).
GROUP_STATE_FAILED = "The config is every member's last known-good one, unchanged: nothing is marked failed"


def kernel_report(stdout):
    """(report, None) when ``stdout`` is the kernel check's report: one JSON object at most KERNEL_REPORT_BYTES
    long whose "ok" is a boolean, its "said" (a string) made one printable line of at most KERNEL_SAID_CHARS; else
    (None, why). Whatever else the container answers (null, [], a number, megabytes) is no report: the gate fails."""
    if len(stdout.encode("utf-8", "replace")) > KERNEL_REPORT_BYTES:
        return None, f"the check answered more than {KERNEL_REPORT_BYTES} bytes, which is no report"
    try:
        found = json.loads(stdout)
    except ValueError:
        return None, "the check answered no JSON report" if stdout.strip() else "no output"
    if not isinstance(found, dict) or not isinstance(found.get("ok"), bool):
        return None, f"the check answered {type(found).__name__} {printable(stdout.strip())[:80]}, not its report"
    said = found.get("said")
    said = printable(said if isinstance(said, str) else "(it said nothing)")[:KERNEL_SAID_CHARS]
    return {"ok": found["ok"], "said": said}, None


def benchmark_fields(line):
    """The figures of benchmark.sh's JSON summary line that the record keeps (None if it is not JSON)."""
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return {key: found.get(key) for key in BENCHMARK_FIELDS} if isinstance(found, dict) else None


def main(argv=None):
    parser = argparse.ArgumentParser(prog=names.GATE_SCRIPT, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--ready-timeout", type=float, required=True)
    parser.add_argument("--toolchain-check", default=None, help="command run inside the running container")
    parser.add_argument("--kernel-check-program", default=None,
                        help="gpu_kernel_check.py's text, run inside the running container")
    parser.add_argument("--kernel-check-nvcc", default=None, help="the image's nvcc, for the kernel check")
    parser.add_argument("--api-key-file", default=None, help="the server's key file (api-key: KEY)")
    parser.add_argument("--gateway", default=None, metavar="SLUG", help="validate the gateway in router/SLUG/")
    parser.add_argument("--config-sha", default=None, metavar="SHA256",
                        help="the compose.yaml the run rendered: the gate judges and records only that config "
                             f"(another: exit {NOT_OWN}, nothing judged)")
    parser.add_argument("--group-step", default=None,
                        choices=("validate", "revalidate", "keep", "failed", "rolled-back"),
                        help="a multi-node group's: validate (rank 0, no rollback), revalidate (rank 0, every "
                             "member's config its last good one: a failure marks nothing failed), keep (a member "
                             "after rank 0 passed), failed (a member after it failed: *.failed, the known-good config "
                             "back), rolled-back (rank 0 once every member is back: validate, stamp, record the "
                             "failure)")
    args = parser.parse_args(argv)
    owner = stack.gateway(args.gateway) if args.gateway else (stack.PROJECT, stack.SERVICE)
    apikey.use_api_key_file(args.api_key_file, lambda url: stack.holds(url, *owner))
    return Gate(args).run()


if __name__ == "__main__":
    sys.exit(main())
