# deploy/lib/common.sh: paths and small helpers shared by the deploy scripts. Sourced, never run.
# The caller sets SDS_SCRIPT (its own name, used as the message prefix) before sourcing.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=$REPO/.state
LOGS=$STATE/logs
PIDS=$STATE/pids
VENV=$REPO/.venv
# Debian's versioned PostgreSQL binaries; pg_ctl and initdb are not on PATH on a stock machine.
PG_BIN=/usr/lib/postgresql/15/bin
TIMESCALEDB_CONTROL=/usr/share/postgresql/15/extension/timescaledb.control
# The default ports (DEFAULT_*) and the ephemeral-range helpers.
# shellcheck source=deploy/lib/ports.sh
. "$REPO/deploy/lib/ports.sh"

say() { printf '%s: %s\n' "${SDS_SCRIPT:-deploy}" "$*"; }
warn() { printf '%s: warning: %s\n' "${SDS_SCRIPT:-deploy}" "$*" >&2; }
die() { printf '%s: error: %s\n' "${SDS_SCRIPT:-deploy}" "$*" >&2; exit 1; }

need_root() {
    [[ $EUID -eq 0 ]] || die "run as root: it installs Debian packages and runs PostgreSQL and mosquitto under their own users"
}

# Print the last lines of a log to stderr, framed, so a failure explains itself.
log_tail() {
    local file=$1 lines=${2:-30}
    [[ -f $file ]] || return 0
    printf -- '----- last %s lines of %s -----\n' "$lines" "$file" >&2
    tail -n "$lines" "$file" >&2
    printf -- '-----\n' >&2
}

# Make every directory from / down to $2 traversable by user $1.
# PostgreSQL refuses to run as root and mosquitto drops to its own user, so both must be able to
# reach their directories under the work tree (e.g. /work/main/.state). Where a parent denies them,
# grant only o+x (traverse, not list) and say so.
ensure_traversable() {
    local user=$1 path=$2 dir=""
    local IFS=/
    local part
    for part in $path; do
        [[ -n $part ]] || continue
        dir+="/$part"
        [[ -d $dir ]] || break
        if ! runuser -u "$user" -- test -x "$dir" 2>/dev/null; then
            chmod o+x "$dir"
            say "granted o+x on $dir so that user $user can reach its files below it"
        fi
    done
}

# read_line VAR FILE: VAR = FILE's first line (with or without its newline); status 1, VAR
# empty, when FILE is missing or empty. For files that may vanish while they are read (a pid
# file its process removes, /proc/PID/stat): never `VAR=$(<FILE)` there. Under `set -e`, when
# FILE is gone, bash 5.2 ends the whole script at that line whatever `||` or `if` surrounds it,
# with status 1 and no message (measured: `rabbitmq.sh stop` died so once the stopped node's
# /proc/PID/stat went away, failing `services.sh stop`, 2 runs in 5).
read_line() {
    local _line=
    { read -r _line <"$2" || [[ -n $_line ]]; } 2>/dev/null || _line=
    printf -v "$1" '%s' "$_line"
    [[ -n $_line ]]
}

# pid_in FILE: the pid in FILE, or "gone" when FILE is missing (for messages; see read_line).
pid_in() {
    local pid
    read_line pid "$1" || pid=gone
    echo "$pid"
}

# True when $1 is a pid file naming a live process whose command line contains $2.
# Checking the command line guards against a recycled pid after a reboot or a crash.
pid_alive() {
    local pidfile=$1 pattern=$2 pid
    read_line pid "$pidfile" || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # Into a variable, not `| grep -q`: under pipefail, grep leaving at its first match can
    # SIGPIPE tr on a long command line (a RabbitMQ node's) and make a live process look dead.
    local cmd
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    [[ $cmd == *"$pattern"* ]]
}

# True while pid $1 runs: exists and is not a zombie. The processes stop_pidfile stops are not
# our children (setsid, their starter gone), so their zombies wait for PID 1 to reap them, and
# kill -0 succeeds on a zombie: under an init that reaps every few seconds (a container's or a
# VM sandbox's, measured: 2 s) each stop waited that long for a process that had already exited.
pid_running() {
    local stat
    read_line stat "/proc/$1/stat" || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# Send SIGTERM (or signal $4, e.g. QUIT for nginx's graceful stop) to the process in a pid file,
# wait up to $3 seconds for it to exit, then SIGKILL. Removes the file.
stop_pidfile() {
    local pidfile=$1 pattern=$2 timeout=${3:-20} sig=${4:-TERM} pid i
    if ! pid_alive "$pidfile" "$pattern"; then
        rm -f "$pidfile"
        return 1
    fi
    read_line pid "$pidfile" || return 1  # removed meanwhile: it stopped by itself
    kill -"$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 20; i++)); do
        pid_running "$pid" || break
        sleep 0.05
    done
    if pid_running "$pid"; then
        warn "pid $pid ($pattern) ignored SIG$sig for ${timeout}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

# Write stdin to $1 only when the content differs, so that reruns leave files (and mtimes) alone.
# Prints "changed" when it wrote. Mode $2 (default 644).
write_if_changed() {
    local target=$1 mode=${2:-644} tmp
    tmp=$(mktemp "$target.XXXXXX")
    cat >"$tmp"
    if [[ -f $target ]] && cmp -s "$tmp" "$target"; then
        rm -f "$tmp"
        return 0
    fi
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$target"
    echo changed
}

# ---- supervision (deploy/lib/supervise.py; docs/operations.md "Supervision") ---------------------
# Each long-running process runs under its own supervise.py, which restarts it with backoff when
# it dies. $PIDS/<name>.pid holds the supervisor's pid; its command line holds the child's, so
# pid_alive's marker checks work on it. The status and metrics files are in $SUPERVISE.
SUPERVISE=$STATE/supervise

# supervise_start NAME LOG [supervise.py options] -- COMMAND...: start NAME under supervision,
# its output (and the supervisor's lines) appended to LOG. setsid: its own session, so closing
# this terminal or a Ctrl-C here does not reach it (in a script a background child is never a
# process-group leader, so setsid does not fork and $! is the supervisor itself).
supervise_start() {
    local name=$1 log=$2
    shift 2
    mkdir -p "$SUPERVISE" "$PIDS"
    rm -f "$SUPERVISE/$name.status"
    setsid /usr/bin/python3 "$REPO/deploy/lib/supervise.py" --name "$name" --state "$SUPERVISE" \
        "$@" >>"$log" 2>&1 </dev/null &
    echo $! >"$PIDS/$name.pid"
    SUP_SEEN[$name]=0 SUP_BASE[$name]=0
}

# last_run_tail NAME LOG: the end of LOG since NAME's supervisor last started it (at most 20
# lines), framed, to stderr: why that run died.
last_run_tail() {
    [[ -f $2 ]] || return 0
    printf -- '----- the last run of %s in %s -----\n' "$1" "$2" >&2
    tail -n 400 "$2" | tac | sed -n "1,/supervise\[$1\]: started/p" | tac | tail -n 20 >&2
    printf -- '-----\n' >&2
}

# The restarts of each supervised process when a start began waiting for it (SUP_BASE) and
# already reported (SUP_SEEN), by supervised_note_deaths.
declare -A SUP_SEEN=() SUP_BASE=()
# A start waits through this many deaths (the supervisor's backoff between them: 0.5, 1, 2,
# 4 s; a port held for a moment is free by then), then gives up: a broken setting fails within
# seconds, not minutes.
START_DEATHS=5

# supervised_note_deaths NAME LOG: while a start waits for NAME through its supervisor's
# retries, report each death since the last call, with the end of LOG; false once NAME died
# START_DEATHS times since the wait began (a death before the first call counts only for a
# process this script started: supervise_start counts from 0).
supervised_note_deaths() {
    local file=$SUPERVISE/$1.status state child restarts spid words
    [[ -s $file && -s $PIDS/$1.pid ]] || return 0
    IFS=$' \t' read -r state child restarts spid words <"$file" || true
    [[ $spid == "$(pid_in "$PIDS/$1.pid")" && $restarts =~ ^[0-9]+$ ]] || return 0
    if [[ -z ${SUP_SEEN[$1]+set} ]]; then
        SUP_SEEN[$1]=$restarts SUP_BASE[$1]=$restarts
    elif ((restarts > SUP_SEEN[$1])); then
        SUP_SEEN[$1]=$restarts
        if ((restarts - SUP_BASE[$1] < START_DEATHS)); then
            warn "$1 died at its start ($words); its supervisor starts it again, waiting for it"
        else
            warn "$1 died at its start ($words), $START_DEATHS times: giving up waiting"
        fi
        last_run_tail "$1" "$2"
    fi
    ((restarts - SUP_BASE[$1] < START_DEATHS))
}

# supervised_status NAME: "STATE<TAB>words" from NAME's status file when the supervisor in
# $PIDS/NAME.pid wrote it (STATE: running, backoff, refused, stopped); nothing otherwise (a
# process started by an older version without a supervisor).
supervised_status() {
    local file=$SUPERVISE/$1.status state child restarts spid words
    [[ -s $file && -s $PIDS/$1.pid ]] || return 0
    IFS=$' \t' read -r state child restarts spid words <"$file" || true
    [[ $spid == "$(pid_in "$PIDS/$1.pid")" ]] || return 0
    printf '%s\t%s\n' "$state" "child pid $child, $words"
}

# The wait for a just-started child to come up: true once NAME's status says running.
supervised_running() { [[ $(supervised_status "$1") == running$'\t'* ]]; }
