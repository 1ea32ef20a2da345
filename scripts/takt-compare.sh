#!/usr/bin/env bash
# Side by side with TAKT 0.60 itself: the same fixed path of two builtin TAKT v0.60 workflows,
# run by TAKT with its mock provider and by Maestro against the scripted model server, each
# printing its step order, its model calls (per step and in all), its final status, and the
# median wall time and peak resident set over RUNS runs. Figures and commands are in
# docs/benchmarks.md ("Side by side with TAKT 0.60"). A manual comparison: CI never runs it.
#
#   bash scripts/takt-reference.sh DIR     # once: node 24 and TAKT 0.60.0 into DIR
#   bash scripts/takt-compare.sh DIR [RUNS]
#
# The paths:
#   compound-eye  evaluate (parallel: eye1, eye2, both `done`) -> synthesize -> COMPLETE
#   backend       develop (workflow_call into development-core: plan, whose second rule,
#                 "the user is asking a question", leads to COMPLETE) -> COMPLETE
#
# TAKT runs as `takt --pipeline --skip-git --provider mock --workflow NAME --task TASK` in a
# fresh directory, with its own configuration directory (TAKT_CONFIG_DIR), the scenario below in
# TAKT_MOCK_SCENARIO and TAKT_MOCK_CALL_LOG counting the mock provider's calls; the step order
# and calls per step come from its session log (.takt/runs/*/logs/*.jsonl), the wall time and
# peak RSS from GNU time. Maestro's side is `cargo bench -p maestro-cli --bench takt_compare`
# (crates/maestro-cli/benches/takt_compare.rs), which scripts the same answers.
#
# Environment: TAKT_COMPARE_WORKFLOWS (default "compound-eye,backend"); SKIP_MAESTRO=1 or
# SKIP_TAKT=1 run one side only; TAKT_COMPARE_BIN measures another build of `maestro`;
# TAKT_COMPARE_PROFILE=debug runs Maestro's side from the debug build (`cargo test --bench`),
# which is quicker to build than the release one and slower to run.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
	echo "takt-compare: $*" >&2
	exit 1
}

[ $# -ge 1 ] || die "usage: bash scripts/takt-compare.sh TAKT_DIR [RUNS] (TAKT_DIR from scripts/takt-reference.sh)"
TAKT_DIR="$(cd "$1" && pwd)"
RUNS="${2:-5}"
NODE="$TAKT_DIR/bin/node"
TAKT="$TAKT_DIR/bin/takt"
WORKFLOWS="${TAKT_COMPARE_WORKFLOWS:-compound-eye,backend}"
if [ "${SKIP_TAKT:-}" != 1 ]; then
	[ -x "$TAKT" ] && [ -x "$NODE" ] ||
		die "$TAKT_DIR has no bin/takt or bin/node; install TAKT there first: bash scripts/takt-reference.sh $TAKT_DIR"
	[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is missing; install it (Debian: apt-get install time)"
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

task_of() {
	case "$1" in
	compound-eye) echo "Review the module layout" ;;
	backend) echo "Why does the service use a repository layer?" ;;
	*) die "no scripted path for workflow '$1' (known: compound-eye, backend)" ;;
	esac
}

# TAKT's mock scenario (src/infra/mock/scenario.ts of TAKT 0.60.0): a JSON array of answers;
# an answer naming a persona goes to the next call of that persona, the others in order. Each
# step makes its own turn (phase 1), writes its report in a second call (phase 2) and, when it
# has more than one rule, asks the `conductor` persona to pick one (phase 3), which a mock answers
# in structured output ({"step": N}, 1-based).
scenario_of() {
	case "$1" in
	compound-eye)
		cat <<'EOF'
[
  {"persona": "coder", "status": "done", "content": "The module layout is sound."},
  {"persona": "coder", "status": "done", "content": "The module layout is sound."},
  {"persona": "coder", "status": "done", "content": "# Eye Review Result\n\n## Conclusion\nThe module layout is sound."},
  {"persona": "coder", "status": "done", "content": "# Eye Review Result\n\n## Conclusion\nThe module layout is sound."},
  {"persona": "conductor", "status": "done", "content": "", "structured_output": {"step": 1, "reason": "done"}},
  {"persona": "conductor", "status": "done", "content": "", "structured_output": {"step": 1, "reason": "done"}},
  {"persona": "supervisor", "status": "done", "content": "Both eyes agree."},
  {"persona": "supervisor", "status": "done", "content": "# Multi-Eye Review Synthesis\n\n## Conclusion\nBoth eyes agree."}
]
EOF
		;;
	backend)
		cat <<'EOF'
[
  {"persona": "planner", "status": "done", "content": "The task is a question about the design, not a change request."},
  {"persona": "planner", "status": "done", "content": "# Plan\n\nNo implementation: the user asked a question."},
  {"persona": "conductor", "status": "done", "content": "", "structured_output": {"step": 2, "reason": "a question"}}
]
EOF
		;;
	esac
}

# Reads one TAKT run (session log, call log, GNU time's output) and prints one JSON line:
# steps, calls per step, calls in all, status, wall seconds, peak RSS in KiB.
SUMMARISE='
const fs = require("fs");
const [log, calls, timed] = process.argv.slice(1);
const events = fs.readFileSync(log, "utf8").split("\n").filter(Boolean).map(JSON.parse);
const top = { items: [] };
const stack = [top];
const perStep = {};
let status = "failed";
for (const e of events) {
  const frame = stack[stack.length - 1];
  if (e.type === "workflow_call_start") {
    const s = { name: e.step, subs: [], call: { items: [] } };
    frame.items.push(s);
    stack.push(s.call);
  } else if (e.type === "workflow_call_complete") {
    stack.pop();
  } else if (e.type === "step_start") {
    const s = { name: e.step, subs: [] };
    frame.items.push(s);
    frame.cur = s;
    if (e.workflow) frame.workflow = e.workflow;
  } else if (e.type === "phase_start" && e.phase === 1 && frame.cur && e.step !== frame.cur.name) {
    if (!frame.cur.subs.includes(e.step)) frame.cur.subs.push(e.step);
  } else if (e.type === "workflow_complete" && stack.length === 1) {
    status = "completed";
  } else if (e.type === "workflow_abort" && stack.length === 1) {
    status = "aborted";
  }
  // One call per phase 1 and 2, one per judge stage tried in phase 3.
  if ((e.type === "phase_start" && e.phase !== 3) || e.type === "phase_judge_stage") {
    perStep[e.step] = (perStep[e.step] || 0) + 1;
  }
}
const render = (items) => items.map((s) => s.call
  ? `${s.name}{${s.call.workflow || "?"}: ${render(s.call.items)}}`
  : s.subs.length ? `${s.name}[${s.subs.sort().join(",")}]` : s.name).join(" -> ");
const sent = fs.readFileSync(calls, "utf8").split("\n").filter((l) => l.includes("\"event\":\"start\"")).length;
const [wall, rss] = fs.readFileSync(timed, "utf8").trim().split("\n").pop().split(" ");
console.log(JSON.stringify({ steps: render(top.items), perStep, sent, status, wall: Number(wall), rss: Number(rss) }));
'

# One TAKT run of workflow $1 in a fresh directory; prints the summary line.
takt_once() {
	local wf="$1" run
	run="$(mktemp -d "$WORK/run.XXXX")"
	mkdir -p "$run/config" "$run/project"
	printf 'language: en\nprovider: mock\nnotification_sound: false\n' >"$run/config/config.yaml"
	scenario_of "$wf" >"$run/scenario.json"
	: >"$run/calls.jsonl"
	if ! (cd "$run/project" && env TAKT_CONFIG_DIR="$run/config" TAKT_NO_TTY=1 NO_UPDATE_NOTIFIER=1 \
		GIT_TERMINAL_PROMPT=0 TAKT_MOCK_SCENARIO="$run/scenario.json" TAKT_MOCK_CALL_LOG="$run/calls.jsonl" \
		/usr/bin/time -f '%e %M' -o "$run/time" \
		"$TAKT" --pipeline --skip-git --provider mock --workflow "$wf" --task "$(task_of "$wf")" \
		>"$run/out.txt" 2>&1); then
		echo "takt $wf: the run failed; its output:" >&2
		tail -20 "$run/out.txt" >&2
		return 1
	fi
	"$NODE" -e "$SUMMARISE" "$(ls "$run"/project/.takt/runs/*/logs/*.jsonl | head -1)" "$run/calls.jsonl" "$run/time"
}

# The median and range of the runs' summary lines.
REPORT='
const [wf, ...lines] = process.argv.slice(1);
const runs = lines.map(JSON.parse);
const first = runs.shift(); // not counted: it pages TAKT in
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const steps = Object.entries(first.perStep).sort().map(([s, n]) => `${s} ${n}`).join(", ");
for (const r of runs) if (r.steps !== first.steps) throw new Error(`${wf}: the path changed between runs`);
const walls = runs.map((r) => r.wall), rss = runs.map((r) => r.rss / 1024);
console.log(`takt ${wf}: steps ${first.steps} -> ${first.status}`);
console.log(`takt ${wf}: model calls ${first.sent} (${steps})`);
console.log(`takt ${wf}: wall median ${median(walls).toFixed(2)} s (min ${Math.min(...walls).toFixed(2)}, max ${Math.max(...walls).toFixed(2)}), ` +
  `peak RSS median ${median(rss).toFixed(1)} MiB (min ${Math.min(...rss).toFixed(1)}, max ${Math.max(...rss).toFixed(1)}) over ${runs.length} runs`);
'

status=0
if [ "${SKIP_TAKT:-}" != 1 ]; then
	echo "TAKT $("$TAKT" --version 2>/dev/null | tail -1) on node $("$NODE" --version), $RUNS runs each (after one not counted)"
	for wf in ${WORKFLOWS//,/ }; do
		lines=()
		for _ in $(seq 0 "$RUNS"); do
			line="$(takt_once "$wf")" || {
				status=1
				continue 2
			}
			lines+=("$line")
		done
		"$NODE" -e "$REPORT" "$wf" "${lines[@]}"
	done
fi

if [ "${SKIP_MAESTRO:-}" != 1 ]; then
	cargo_cmd=(cargo bench -q -p maestro-cli --bench takt_compare)
	[ "${TAKT_COMPARE_PROFILE:-release}" = debug ] && cargo_cmd=(cargo test -q -p maestro-cli --bench takt_compare)
	echo "Maestro (${cargo_cmd[*]}), $RUNS runs each (after one not counted)"
	TAKT_COMPARE_WORKFLOWS="$WORKFLOWS" TAKT_COMPARE_RUNS="$RUNS" \
		"${cargo_cmd[@]}" 2>"$WORK/bench.err" || {
		status=1
		tail -20 "$WORK/bench.err" >&2
	}
fi
exit "$status"
