#!/usr/bin/env python3
"""A subagent child in Python, written from protocol/README.md alone (standard library only).

    subagent-supervisor run --preset explore --workspace . --child examples/python_child.py \
        --brief "What does this repository do?" --model openai:gpt-4.1-mini

It speaks protocol v1 on stdin/stdout, offers its model exactly the tools in welcome.task.tools,
asks the supervisor before every call, runs the local tools itself (inside its sandbox) and lets
the supervisor run the brokered ones (web_fetch, web_search). The shipped presets list
"${interpreter}" in their execute rules, so /usr/bin/env and python3 may run; nothing else changes.
"""
import json
import os
import re
import subprocess
import sys


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def receive():
    line = sys.stdin.readline()
    if not line:
        sys.exit(3)  # the supervisor went away
    return json.loads(line)


class Cancelled(Exception):
    pass


state = {"wrap_up": False, "limit": 16000}


def await_answer(request_id):
    """The answer to one request; wrap_up may arrive at any time, cancel and error end the child."""
    while True:
        m = receive()
        if m["type"] == "wrap_up":
            state["wrap_up"] = True
            continue
        if m["type"] == "cancel":
            raise Cancelled()
        if m["type"] == "error":
            sys.stderr.write("supervisor error: %s: %s\n" % (m.get("code"), m.get("message")))
            sys.exit(3)
        if m.get("id") == request_id:
            return m


def inside(workspace, path):
    full = os.path.realpath(os.path.join(workspace, path or "."))
    if full != workspace and not full.startswith(workspace + os.sep):
        raise ValueError("path %r is outside the workspace" % path)
    return full


def run(argv, workspace, shell=False, timeout=120, env=None):
    # stdin=DEVNULL opens /dev/null read-write: every preset allows that (it grants nothing).
    p = subprocess.run(argv, cwd=workspace, shell=shell, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout, env=env)
    return p.stdout.decode("utf-8", "replace") + "\n[exit %d]" % p.returncode


def local_tool(name, args, workspace):
    if name == "list_dir":
        d = inside(workspace, args.get("path"))
        return "\n".join(e + ("/" if os.path.isdir(os.path.join(d, e)) else "") for e in sorted(os.listdir(d)))
    if name == "read_file":
        with open(inside(workspace, args["path"]), encoding="utf-8", errors="replace") as f:
            return f.read()
    if name == "grep":
        pattern, hits = re.compile(args["pattern"]), []
        for root, dirs, files in os.walk(inside(workspace, args.get("path"))):
            dirs[:] = sorted(x for x in dirs if x != ".git")
            for fn in sorted(files):
                p = os.path.join(root, fn)
                try:
                    with open(p, encoding="utf-8") as f:
                        for n, line in enumerate(f, 1):
                            if pattern.search(line):
                                hits.append("%s:%d: %s" % (os.path.relpath(p, workspace), n, line.rstrip("\n")))
                except (UnicodeDecodeError, OSError):
                    continue
        return "\n".join(hits) or "(no matches)"
    if name == "run_command":
        return run(args["command"], workspace, shell=True, timeout=args.get("timeout_seconds", 120))
    if name.startswith("git_"):
        extra = {"git_status": ["status", "--short", "--branch"], "git_log": ["log", "--oneline", "-20"],
                 "git_diff": ["diff"] + ([args["rev"]] if args.get("rev") else []),
                 "git_show": ["show", args.get("rev", "HEAD")]}[name]
        # The sandbox lets git read no system or global configuration (and none is wanted).
        env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_OPTIONAL_LOCKS="0",
                   GIT_PAGER="cat", GIT_TERMINAL_PROMPT="0")
        return run(["git", "-c", "safe.directory=*", "--no-pager"] + extra, workspace, env=env)
    raise ValueError("this child does not implement %s" % name)


def call_tool(call, workspace, n):
    request_id = "t%d" % n
    send({"type": "tool_request", "id": request_id, "tool": call["name"], "args": call.get("arguments") or {}})
    answer = await_answer(request_id)
    if answer["type"] == "tool_result":  # brokered: the supervisor ran it
        return answer["content"] if answer["ok"] else "Tool error: " + answer["content"]
    if answer["decision"] != "allow":
        return "Denied by the supervisor: " + answer.get("reason", "")
    try:
        text, ok = local_tool(call["name"], call.get("arguments") or {}, workspace), True
    except Exception as e:  # bad arguments, missing files, timeouts: the model reads the error
        text, ok = "%s: %s" % (type(e).__name__, e), False
    text = text.encode("utf-8")[: state["limit"]].decode("utf-8", "ignore")  # tool_result_bytes
    send({"type": "tool_done", "id": request_id, "ok": ok, "bytes": len(text.encode("utf-8"))})
    return text


def main():
    send({"type": "hello", "versions": [1], "agent": "python-example/1"})
    welcome = receive()
    if welcome["type"] != "welcome":
        sys.stderr.write("refused: %s\n" % welcome.get("message"))
        return 3
    task = welcome["task"]
    state["limit"] = task["limits"].get("tool_result_bytes") or 16000
    workspace = os.path.realpath(task["workspace"])
    messages = [{"role": "system", "content": "You are a %s subagent working in %s. Use the tools; end with "
                 "'## Summary' and what you found." % (task["preset"], workspace)},
                {"role": "user", "content": task["brief"]}]
    turns = tools_run = 0
    text = ""
    try:
        while True:
            turns += 1
            request_id = "m%d" % turns
            send({"type": "model_request", "id": request_id, "messages": messages,
                  "tools": [] if state["wrap_up"] else task["tools"]})
            reply = await_answer(request_id)
            if reply["type"] == "model_error":
                if reply["code"] == "budget_exhausted" and not state["wrap_up"]:
                    state["wrap_up"] = True
                    continue
                break
            text = reply.get("content") or text
            calls = reply.get("tool_calls") or []
            assistant = {"role": "assistant", "content": reply.get("content", "")}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
            if not calls or state["wrap_up"]:
                break
            for call in calls:
                tools_run += 1
                messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["name"],
                                 "content": call_tool(call, workspace, tools_run)})
    except Cancelled:
        return 4
    summary = text.split("## Summary", 1)[-1].strip().split("\n")[0] if text else "no answer"
    send({"type": "final", "summary": summary[:2000], "answer": text})
    return 0


if __name__ == "__main__":
    sys.exit(main())
