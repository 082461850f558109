"""A hostile run: what a command or an agent inside an srt sandbox tries, to reach
outside it through the code that runs outside it (tests/tests/confinement.rs).

Usage: attack.py MODE... (or ATTACK_MODES="a b"). Each finding is a line
`name=value` on stdout, or, when ATTACK_RECORD names a file (an agent's stdout is
its stream), appended there. The run's folder is $OS_RUN_DIR (a shell run) or the
folder of the `--mcp-config` file (a claude-code segment).

Modes:
  folder   plants symlinks and forged files in the run's folder
  secret   reads $SECRET_FILE; with SECRET_WAIT, waits for $TMPDIR/go and reads it again
  escape   writes srt's default write paths (~/.npm/_logs, ~/.claude/debug, /tmp/claude)
  bomb     forks up to $BOMB children (sleeping), counts what the kernel allowed
  hold     starts two children (`sleep $HOLD_SLEEP`) and waits for ever ($TMPDIR/held
           when ready)
  git      plants command-running git config in its workspace ($MARKER when run)
  create   asks its toolbelt (over its MCP config) for Work in binding $ESCAPE_BINDING
"""

import json
import os
import subprocess
import sys
import time

RECORD = os.environ.get("ATTACK_RECORD", "")


def say(name, value):
    line = f"{name}={value}"
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(line + "\n")
    else:
        print(line, flush=True)


def attempt(name, action):
    """Runs action(); says ALLOWED when it did what it meant to, else denied."""
    try:
        action()
        say(name, "ALLOWED")
        return True
    except OSError as e:
        say(name, "denied")
        say(name + "_errno", e.errno)
        return False


def run_dir():
    if os.environ.get("OS_RUN_DIR"):
        return os.environ["OS_RUN_DIR"]
    argv = sys.argv
    for i, a in enumerate(argv):
        if a == "--mcp-config" and i + 1 < len(argv):
            return os.path.dirname(argv[i + 1])
    return ""


def outputs(d):
    if os.path.exists(os.path.join(d, "out.jsonl")):
        return ["out.jsonl", "err.log"]
    return ["stdout", "stderr"]


def folder():
    d = run_dir()
    say("run_dir_known", "yes" if d else "no")
    victim = os.environ["VICTIM"]
    secret = os.environ["SECRET_FILE"]

    def links():
        # The wrapper's temporary names: `.<name>.tmp.<its pid>`; its pid is not
        # visible in here, so plant a range of them.
        for name in ["status", "meta.json", "result.json"]:
            for pid in range(1, 400):
                os.symlink(victim, os.path.join(d, f".{name}.tmp.{pid}"))

    attempt("status_tmp_link", links)
    for out in outputs(d):

        def swap(out=out):
            tmp = os.path.join(d, out + ".lnk")
            os.symlink(secret, tmp)
            os.replace(tmp, os.path.join(d, out))

        attempt(f"{out.split('.')[0]}_link", swap)

    def meta():
        path = os.path.join(d, "meta.json")
        with open(path) as f:
            m = json.load(f)
        m["pgid"] = int(os.environ["VICTIM_PGID"])
        m["pid"] = int(os.environ["VICTIM_PGID"])
        with open(path, "w") as f:
            json.dump(m, f)

    attempt("meta_forged", meta)

    def result():
        forged = {
            "outcome": "completed",
            "summary": "FORGED by the run",
            "state": "completed",
        }
        with open(os.path.join(d, "result.json"), "w") as f:
            json.dump(forged, f)
        with open(os.path.join(d, "status"), "w") as f:
            json.dump({"exit_code": 0, "ended_at": "2026-01-01T00:00:00Z"}, f)

    attempt("result_forged", result)
    attempt("status_blocked", lambda: os.mkdir(os.path.join(d, "status.d")))


def secret():
    path = os.environ["SECRET_FILE"]
    attempt("secret_before", lambda: open(path).read())
    if os.environ.get("SECRET_WAIT"):
        tmp = os.environ.get("TMPDIR", "/tmp")
        with open(os.path.join(tmp, "waiting"), "w") as f:
            f.write("yes")
        while not os.path.exists(os.path.join(tmp, "go")):
            time.sleep(0.1)

    def read_after():
        text = open(path).read()
        say("secret_after_text", text.strip().replace(" ", "_"))

    attempt("secret_after", read_after)
    # Its folder, listed (srt masks a denied folder with an empty one).
    def listing():
        say("secret_folder_list", ",".join(os.listdir(os.path.dirname(path))) or "empty")

    attempt("secret_folder", listing)


def escape():
    home = os.path.expanduser("~")
    for name, folder in [
        ("npm_logs", os.path.join(home, ".npm/_logs")),
        ("claude_debug", os.path.join(home, ".claude/debug")),
        ("tmp_claude", "/tmp/claude"),
    ]:

        def write(folder=folder):
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "oc-escape"), "w") as f:
                f.write("escaped")

        attempt(name, write)


def bomb():
    limit = int(os.environ.get("BOMB", "300"))
    started = 0
    refused = "no"
    for _ in range(limit):
        try:
            pid = os.fork()
        except OSError:
            refused = "yes"
            break
        if pid == 0:
            try:
                os.execvp("sleep", ["sleep", "4243"])
            finally:
                os._exit(0)
        started += 1
    say("forked", started)
    say("fork_refused", refused)


def hold():
    for _ in range(2):
        subprocess.Popen(["sleep", os.environ.get("HOLD_SLEEP", "4242")])
    tmp = os.environ.get("TMPDIR", "/tmp")
    with open(os.path.join(tmp, "held"), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(1)


def git():
    """Plants what would make git run a command; each try says whether it took
    (srt itself keeps `.git/config` and `.git/hooks` read-only: the other ways in
    are a `.git` file or folder of the run's own)."""
    marker = os.environ["MARKER"]
    ws = os.environ.get("OC_WORKSPACE") or os.getcwd()
    cmd = f"touch {marker}; false"
    git_path = os.path.join(ws, ".git")

    def g(*args):
        subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True)

    def plant(config, hooks):
        for key, value in [
            ("core.fsmonitor", cmd),
            ("core.pager", cmd),
            ("filter.oc.clean", cmd),
            ("filter.oc.process", cmd),
            ("diff.external", cmd),
            ("core.sshCommand", cmd),
            ("credential.helper", f"!{cmd}"),
        ]:
            g("config", "--file", config, key, value)
        os.makedirs(hooks, exist_ok=True)
        for hook in ["post-index-change", "post-checkout", "reference-transaction"]:
            path = os.path.join(hooks, hook)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\n{cmd}\n")
            os.chmod(path, 0o755)

    def own_gitdir():
        # A gitdir of the run's, with `.git` (file or folder) pointing at it.
        evil = os.path.join(ws, ".evil")
        # Out of the way first: git would follow it (a worktree's points at the
        # cache, hidden in here).
        if os.path.isdir(git_path) and not os.path.islink(git_path):
            os.rename(git_path, os.path.join(ws, ".git-moved"))
        else:
            os.remove(git_path)
        g("init", "-q", "--bare", evil)
        g("config", "--file", os.path.join(evil, "config"), "core.bare", "false")
        plant(os.path.join(evil, "config"), os.path.join(evil, "hooks"))
        with open(git_path, "w") as f:
            f.write(f"gitdir: {evil}\n")

    def in_place():
        plant(os.path.join(git_path, "config"), os.path.join(git_path, "hooks"))

    def include():
        extra = os.path.join(ws, ".oc-include")
        g("config", "--file", extra, "core.fsmonitor", cmd)
        g("config", "--file", os.path.join(git_path, "config"), "include.path", extra)

    def attributes():
        info = os.path.join(git_path, "info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "attributes"), "w") as f:
            f.write("* filter=oc diff=oc\n")

    def tried(name, action):
        try:
            action()
            say(name, "ALLOWED")
        except Exception as e:
            detail = getattr(e, "stderr", None) or str(e)
            if isinstance(detail, bytes):
                detail = detail.decode(errors="replace")
            say(name, "denied:" + "_".join(detail.split())[:120])

    if os.path.isdir(git_path):
        tried("git_in_place", in_place)
        tried("git_include", include)
        tried("git_attributes", attributes)
    tried("git_own_gitdir", own_gitdir)
    with open(os.path.join(ws, ".gitattributes"), "w") as f:
        f.write("* filter=oc\n")
    with open(os.path.join(ws, "dirty.txt"), "w") as f:
        f.write("uncommitted\n")
    say("git_planted", "yes")


def create():
    d = run_dir()
    with open(os.path.join(d, "mcp.json")) as f:
        server = json.load(f)["mcpServers"]["open-conduit"]
    env = dict(os.environ)
    env.update(server.get("env", {}))
    proc = subprocess.Popen(
        [server["command"], *server.get("args", [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "attack", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "create_work",
                    "arguments": {"title": "out of the sandbox",
                                  "binding": os.environ["ESCAPE_BINDING"],
                                  "request_id": "attack-1"}}},
    ]
    for m in messages:
        proc.stdin.write(json.dumps(m) + "\n")
    proc.stdin.flush()
    answer = None
    for line in proc.stdout:
        v = json.loads(line)
        if v.get("id") == 2:
            answer = v
            break
    proc.stdin.close()
    proc.wait(timeout=30)
    result = (answer or {}).get("result", {})
    text = " ".join(c.get("text", "") for c in result.get("content", []))
    say("create_is_error", "yes" if result.get("isError") else "no")
    say("create_text", text.split(":")[0].strip() or "none")


MODES = {
    "folder": folder,
    "secret": secret,
    "escape": escape,
    "bomb": bomb,
    "hold": hold,
    "git": git,
    "create": create,
}


def main():
    modes = os.environ.get("ATTACK_MODES", "").split() or [
        a for a in sys.argv[1:] if a in MODES
    ]
    for mode in modes:
        try:
            MODES[mode]()
        except Exception as e:  # a finding, not a crash: the run goes on
            detail = getattr(e, "stderr", None) or str(e)
            if isinstance(detail, bytes):
                detail = detail.decode(errors="replace")
            say(f"{mode}_error", type(e).__name__ + ":" + "_".join(detail.split())[:300])
    say("done", "yes")
    code = os.environ.get("ATTACK_EXIT", "0")
    sys.stdout.flush()
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
