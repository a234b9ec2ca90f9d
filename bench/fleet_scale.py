#!/usr/bin/env python3
"""A large fleet on one machine (issue 35): N rebound processes (one worker each) sharing one
real PostgreSQL, through a real PgBouncer in transaction mode or directly.

  bench/fleet_scale.py chaos --instances 50 --via pgbouncer   # the 50-instance proof
  bench/fleet_scale.py chaos --instances 50 --via direct      # max_connections raised to fit
  bench/fleet_scale.py scaling --instances 1,10,50            # what grows with the fleet
  bench/fleet_scale.py churn --minutes 10                     # a hot queue table over time

chaos: calls are handed over to random instances while a third of the instances are SIGKILLed
and restarted at random moments and the database is crashed (pg_ctl stop -m immediate) and
started once. Then every accepted task must be delivered and in SUCCEEDED, nothing may be
delivered that was never stored, and every key the upstream saw twice must have a cause: the
second delivery came after the lease ran out, and a SIGKILL or the database's crash fell
between the first delivery and the end of its lease (the attempt's record died with it). The
attempt records are compared with the deliveries. Exit status 1 on any violation: the test
command runs a 10-instance version (ctest fleet_scale).

scaling: for each fleet size, a steady load and then an idle spell: claims/s, rows per claim,
the database's CPU, and the connections it holds. churn: 10 instances under a steady load for
M minutes with a short retention, sampling the queue table's size and dead rows.

Everything (the fleet, PostgreSQL, PgBouncer, the upstream, the load) shares this machine.
Prints a Markdown report on stdout; progress on stderr.
"""
import argparse
import glob
import http.client
import http.server
import os
import pwd
import random
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LEASE_S = 7  # must outlast attempt_timeout (2 s) by 5 s
# Both claims (due tasks, and leases that ran out), as pg_stat_statements normalises them.
CLAIM_LIKE = "UPDATE retry_tasks SET %SKIP LOCKED%"


def log(*a):
    print("fleet:", *a, file=sys.stderr, flush=True)


_given = set()


def free_port():
    """A port free now and not handed out before by this run (the kernel may offer one twice)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given:
            _given.add(port)
            return port


def as_root():
    return os.geteuid() == 0


def server_user_cmd(cmd):
    """PostgreSQL and PgBouncer refuse root: a root run hands them to nobody."""
    return ["runuser", "-u", "nobody", "--"] + cmd if as_root() else cmd


def give_to_server_user(path):
    if as_root():
        nobody = pwd.getpwnam("nobody")
        os.chown(path, nobody.pw_uid, nobody.pw_gid)


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def children(pid):
    """The processes whose parent is `pid` (from /proc: no procps needed)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return found


class Postgres:
    """A throwaway server: initdb in a temp dir, 127.0.0.1, pg_stat_statements loaded."""

    def __init__(self, base, max_connections, fsync, naptime="1min"):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
        if not bins:
            sys.exit("no PostgreSQL under /usr/lib/postgresql (scripts/install-deps installs it)")
        self.bin = bins[-1]
        self.dir = os.path.join(base, "pg")
        os.mkdir(self.dir)
        give_to_server_user(self.dir)
        self.max_connections = max_connections
        self.fsync = fsync
        self.naptime = naptime
        subprocess.run(server_user_cmd([f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-U", "rebound", "-A", "trust",
                                        "-E", "UTF8", "--locale=C", "--no-instructions"]),
                       check=True, stdout=subprocess.DEVNULL)
        # The port was free when probed; a test running beside this one may bind it (or take it
        # as an outgoing connection's local port) before the server does: try another, as
        # integration/pg_server.cpp does.
        for tries in range(5):
            self.port = free_port()
            try:
                self.start()
                break
            except subprocess.CalledProcessError:
                if tries == 4:
                    raise
        self.query("CREATE DATABASE rebound")
        self.query("CREATE EXTENSION pg_stat_statements", db="rebound")

    def ctl(self, *args):
        try:
            subprocess.run(server_user_cmd([f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-w", "-t", "60"] + list(args)),
                           check=True, stdout=subprocess.DEVNULL)
        except subprocess.CalledProcessError:
            # pg_ctl says only "could not start server"; the reason is in the server's log.
            try:
                with open(f"{self.dir}/server.log") as f:
                    print(f"pg_ctl {' '.join(args[-1:])} failed; server.log ends:\n" + "".join(f.readlines()[-15:]),
                          file=sys.stderr)
            except OSError:
                pass
            raise

    def start(self):
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.dir} "
                f"-c max_connections={self.max_connections} -c shared_preload_libraries=pg_stat_statements "
                f"-c fsync={'on' if self.fsync else 'off'} -c autovacuum_naptime={self.naptime}")
        self.ctl("-l", f"{self.dir}/server.log", "-o", opts, "start")

    def crash(self):
        self.ctl("stop", "-m", "immediate")

    def stop(self):
        try:
            self.ctl("stop", "-m", "immediate")
        except subprocess.CalledProcessError:
            pass

    def postmaster(self):
        with open(f"{self.dir}/data/postmaster.pid") as f:
            return int(f.readline())

    def cpu(self):
        """Ticks of the postmaster and every process it started that is alive now."""
        pm = self.postmaster()
        return cpu_ticks(pm) + sum(cpu_ticks(p) for p in children(pm))

    def query(self, sql, db="postgres"):
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "rebound", "-d", db, "-Atqc", sql],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{sql}: {out.stderr.strip()}")
        return out.stdout.strip()

    def rows(self, sql, db="rebound"):
        text = self.query(sql, db)
        return [line.split("|") for line in text.splitlines()] if text else []


class PgBouncer:
    """Debian's PgBouncer, transaction pooling, in front of `pg`."""

    def __init__(self, base, pg, server_pool, max_clients):
        self.dir = os.path.join(base, "pgbouncer")
        os.mkdir(self.dir)
        give_to_server_user(self.dir)
        self.port = free_port()
        with open(f"{self.dir}/users.txt", "w") as f:
            f.write('"rebound" ""\n')
        with open(f"{self.dir}/pgbouncer.ini", "w") as f:
            f.write(f"""[databases]
* = host=127.0.0.1 port={pg.port}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/users.txt
pool_mode = transaction
default_pool_size = {server_pool}
max_client_conn = {max_clients}
query_wait_timeout = 5
server_login_retry = 1
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
""")
        for name in ("users.txt", "pgbouncer.ini"):
            give_to_server_user(f"{self.dir}/{name}")
        subprocess.run(server_user_cmd(["/usr/sbin/pgbouncer", "-d", f"{self.dir}/pgbouncer.ini"]), check=True,
                       stdout=subprocess.DEVNULL)
        # pgbouncer creates its pidfile before it writes the pid: the file is read until it
        # holds one (an empty read failed this test under load), and the port until it answers.
        self.pid = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.pid = self.pid or read_pid(f"{self.dir}/pgbouncer.pid")
            if self.pid and can_connect(self.port):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"pgbouncer did not start within 30 s; see {self.dir}/pgbouncer.log")

    def stop(self):
        try:
            os.kill(self.pid, signal.SIGTERM)
        except OSError:
            pass


def read_pid(path):
    """The pid in a daemon's pidfile, or None while it is absent or not yet written whole."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    return int(text) if text.strip().isdigit() else None


def can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


class Upstream:
    """The dependency: answers 200 after `delay`, noting each Idempotency-Key and when."""

    def __init__(self, delay):
        self.seen = []  # (key, monotonic time)
        self.lock = threading.Lock()
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(n)
                key = self.headers.get("Idempotency-Key", "")
                time.sleep(delay)
                with upstream.lock:
                    upstream.seen.append((key, time.monotonic()))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a):
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            request_queue_size = 1024

            def handle_error(self, request, client_address):
                pass  # an instance SIGKILLed mid-request: nothing to report

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Instance:
    def __init__(self, base, index, dsn, upstream_port, pool, retention, binary):
        self.index = index
        self.config = os.path.join(base, f"rebound-{index}.yaml")
        self.log_path = os.path.join(base, f"rebound-{index}.log")
        self.binary = binary
        self.settings = (dsn, upstream_port, pool, retention)
        self.new_ports()
        self.proc = None
        self.kills = []

    def new_ports(self):
        dsn, upstream_port, pool, retention = self.settings
        self.port, self.admin = free_port(), free_port()
        with open(self.config, "w") as f:
            f.write(f"""listen: 127.0.0.1:{self.port}
admin: 127.0.0.1:{self.admin}
workers: 1
log_level: warn
store: {{type: postgres, dsn: "{dsn}", pool: {pool}, lease: {LEASE_S}s, retention: {retention}}}
defaults: {{attempt_timeout: 2s}}
dependencies:
  hooks:
    hosts: ["127.0.0.1:{upstream_port}"]
    context: webhook
    backoff: {{base: 50ms, cap: 500ms}}
    circuit_breaker: {{mode: signal}}
    budget: {{min_retries: 100000}}
""")

    def start(self):
        self.proc = subprocess.Popen([self.binary, "--config", self.config], stdout=open(self.log_path, "a"),
                                     stderr=subprocess.STDOUT)

    def ready(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.admin, timeout=1)
            c.request("GET", "/readyz")
            r = c.getresponse()
            body = r.read().decode()
            return r.status == 200, body
        except OSError:
            return False, ""

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.kills.append(time.monotonic())

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cpu(self):
        return cpu_ticks(self.proc.pid) if self.proc and self.proc.poll() is None else 0


class Load:
    """Hands calls over at `rate` per second to random instances, noting each answer."""

    def __init__(self, fleet, upstream_port, rate, prefix, threads=8):
        self.fleet, self.upstream_port, self.rate, self.prefix = fleet, upstream_port, rate, prefix
        self.accepted, self.refused, self.unanswered = set(), {}, set()
        self.lock = threading.Lock()
        self.stop_at = 0
        self.next_id = 0
        self.threads = threads

    def run(self, seconds):
        self.stop_at = time.monotonic() + seconds
        self.started = time.monotonic()
        workers = [threading.Thread(target=self.worker, args=(i,)) for i in range(self.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def take(self):
        with self.lock:
            n = self.next_id
            self.next_id += 1
        return n

    def worker(self, index):
        conns = {}
        rng = random.Random(index)
        while True:
            n = self.take()
            due = self.started + n / self.rate
            now = time.monotonic()
            if due >= self.stop_at:
                return
            if due > now:
                time.sleep(due - now)
            inst = rng.choice(self.fleet)
            key = f"{self.prefix}-{n}"
            status = self.send(conns, inst, key)
            with self.lock:
                if status == 202:
                    self.accepted.add(key)
                elif status is None:
                    self.unanswered.add(key)
                else:
                    self.refused[key] = status

    def send(self, conns, inst, key):
        """Once, never again: a second hand-over of the key would be a second task."""
        c = conns.get(inst.index)
        if c is None:
            c = conns[inst.index] = http.client.HTTPConnection("127.0.0.1", inst.port, timeout=10)
        try:
            c.request("POST", f"http://127.0.0.1:{self.upstream_port}/hook", body=b'{"event":"paid"}',
                      headers={"Host": f"127.0.0.1:{self.upstream_port}", "Content-Type": "application/json",
                               "Idempotency-Key": key})
            r = c.getresponse()
            r.read()
            return r.status
        except (OSError, http.client.HTTPException):
            c.close()
            conns.pop(inst.index, None)
            return None


class Fleet:
    def __init__(self, args, instances, via, retention="24h"):
        self.base = tempfile.mkdtemp(prefix="rebound-fleet-scale.")
        os.chmod(self.base, 0o755)
        self.via = via
        # Direct: every instance's pool and LISTEN connection, and room for the harness.
        pool = args.pool
        self.pg = Postgres(self.base, max(100, instances * (pool + 1) + 20), args.fsync, args.naptime)
        self.bouncer = None
        self.instances = []
        # From here on a failure stops what was started: a PgBouncer that did not come up left
        # its PostgreSQL running after the test had failed.
        try:
            dsn_port = self.pg.port
            if via == "pgbouncer":
                self.bouncer = PgBouncer(self.base, self.pg, args.server_pool, instances * pool + 100)
                dsn_port = self.bouncer.port
            self.upstream = Upstream(args.upstream_delay)
            dsn = f"host=127.0.0.1 port={dsn_port} dbname=rebound user=rebound"
            self.instances = [Instance(self.base, i, dsn, self.upstream.port, pool, retention, args.binary)
                              for i in range(instances)]
            for inst in self.instances:
                inst.start()
            deadline = time.monotonic() + 90
            for inst in self.instances:
                tries = 0
                while not inst.ready()[0]:
                    if inst.proc.poll() is not None and tries < 3 and "in use" in open(inst.log_path).read():
                        tries += 1  # a port another process took between the probe and the bind
                        inst.new_ports()
                        inst.start()
                    elif time.monotonic() > deadline or inst.proc.poll() is not None:
                        raise RuntimeError(f"instance {inst.index} not ready; see {inst.log_path}")
                    time.sleep(0.1)
        except BaseException:
            self.close(keep=True)
            raise
        log(f"{instances} instances ready via {via}")

    def connections(self):
        return int(self.pg.query("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                 "AND pid <> pg_backend_pid()"))

    def bouncer_clients(self):
        """Established connections to PgBouncer's port: the fleet's side of the pooler."""
        if not self.bouncer:
            return 0
        port = f"{self.bouncer.port:04X}"
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        # local_address is ADDR:PORT in hex; state 01 is ESTABLISHED.
        return sum(1 for r in rows if r[1].endswith(":" + port) and r[3] == "01")

    def claim_stats(self):
        rows = self.pg.rows("SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0), coalesce(sum(total_exec_time), 0) "
                            f"FROM pg_stat_statements WHERE query LIKE '{CLAIM_LIKE}'")
        calls, rows_, ms = rows[0]
        return int(calls), int(rows_), float(ms)

    def close(self, keep=False):
        for inst in self.instances:
            inst.stop()
        if self.bouncer:
            self.bouncer.stop()
        self.pg.stop()
        if keep:
            log(f"logs kept in {self.base}")
        else:
            shutil.rmtree(self.base, ignore_errors=True)

    def wait_drained(self, limit):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                left = int(self.pg.query("SELECT count(*) FROM retry_tasks WHERE status IN ('PENDING', 'IN_FLIGHT')",
                                         "rebound"))
            except RuntimeError:
                left = -1
            if left == 0:
                return True
            time.sleep(0.5)
        return False


def explain_claim(fleet):
    """The claim's plan and cost on the queue as it stands, in a transaction rolled back."""
    now = int(time.time() * 1000)
    sql = (f"BEGIN; EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) UPDATE retry_tasks SET status = 'IN_FLIGHT', "
           f"lease_owner = 'explain', lease_expires = {now + 60000} WHERE id IN (SELECT id FROM retry_tasks "
           f"WHERE status = 'PENDING' AND next_attempt_at <= {now} ORDER BY next_attempt_at LIMIT 64 "
           f"FOR UPDATE SKIP LOCKED) RETURNING id; ROLLBACK;")
    return fleet.pg.query(sql, "rebound")


def chaos(args):
    fleet = Fleet(args, args.instances, args.via)
    report = []
    try:
        rng = random.Random(args.seed)
        load = Load(fleet.instances, fleet.upstream.port, args.rate, "k")
        victims = rng.sample(fleet.instances, max(1, len(fleet.instances) // 3))
        events = []  # (monotonic, what)
        max_conns = [0, 0]
        before_crash = [(0, 0, 0.0)]
        plan = [None]
        sampling = threading.Event()

        def sample():
            while not sampling.is_set():
                try:
                    max_conns[0] = max(max_conns[0], fleet.connections())
                    max_conns[1] = max(max_conns[1], fleet.bouncer_clients())
                except (RuntimeError, OSError):
                    pass
                sampling.wait(0.5)

        def explain_mid_load():
            try:
                plan[0] = explain_claim(fleet)
            except RuntimeError as e:
                plan[0] = str(e)

        def havoc():
            t0 = time.monotonic()
            plan = sorted([(rng.uniform(0.1, 0.8) * args.seconds, v) for v in victims], key=lambda p: p[0])
            crash_at = rng.uniform(0.3, 0.6) * args.seconds
            crashed = False
            for at, victim in plan:
                if not crashed and at > crash_at:
                    time.sleep(max(0, t0 + crash_at - time.monotonic()))
                    crash_database()
                    crashed = True
                time.sleep(max(0, t0 + at - time.monotonic()))
                victim.kill()
                events.append((time.monotonic(), f"SIGKILL instance {victim.index}"))
                threading.Timer(rng.uniform(0.5, 3.0), victim.start).start()
            if not crashed:
                time.sleep(max(0, t0 + crash_at - time.monotonic()))
                crash_database()

        def crash_database():
            try:
                before_crash[0] = fleet.claim_stats()  # the crash resets pg_stat_statements
            except RuntimeError:
                pass
            fleet.pg.crash()
            events.append((time.monotonic(), "database crashed"))
            time.sleep(args.db_down)
            fleet.pg.start()
            events.append((time.monotonic(), "database started"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        chaos_thread = threading.Thread(target=havoc)
        t_start = time.monotonic()
        cpu0, ticks0 = fleet.pg.cpu(), time.monotonic()
        chaos_thread.start()
        threading.Timer(args.seconds * 0.2, explain_mid_load).start()
        load.run(args.seconds)
        chaos_thread.join()
        plan_text = plan[0]
        drained = fleet.wait_drained(args.drain)
        t_end = time.monotonic()
        sampling.set()
        db_cpu = (fleet.pg.cpu() - cpu0) / os.sysconf("SC_CLK_TCK") / (t_end - ticks0)
        time.sleep(1.0)  # the upstream's last answers
        calls, claimed_rows, claim_ms = (a + b for a, b in zip(fleet.claim_stats(), before_crash[0]))

        # What the database holds, against what the upstream saw and what the callers heard.
        tasks = {row[0]: row[1] for row in fleet.pg.rows("SELECT idempotency_key, status FROM retry_tasks")}
        records = {row[0]: int(row[1]) for row in fleet.pg.rows(
            "SELECT t.idempotency_key, count(a.number) FROM retry_tasks t LEFT JOIN attempt_logs a ON a.task_id = t.id "
            "GROUP BY t.idempotency_key")}
        failed_attempts = fleet.pg.rows("SELECT error_type, status, count(*) FROM attempt_logs "
                                        "WHERE status <> 200 GROUP BY 1, 2 ORDER BY 3 DESC")
        with fleet.upstream.lock:
            seen = list(fleet.upstream.seen)
        deliveries = {}
        for key, at in seen:
            deliveries.setdefault(key, []).append(at)
        problems = []
        for key in load.accepted:
            if key not in deliveries:
                problems.append(f"{key}: accepted (202) and never delivered")
            if tasks.get(key) != "SUCCEEDED":
                problems.append(f"{key}: accepted and {tasks.get(key, 'not stored')}")
        for key in deliveries:
            if key not in tasks:
                problems.append(f"{key}: delivered but never stored")
        for key, status in tasks.items():
            if status != "SUCCEEDED":
                problems.append(f"{key}: {status} at the end")
        kills = [at for at, what in events if what.startswith("SIGKILL")]
        outage = [at for at, what in events if what.startswith("database")]
        explained_kill = explained_db = 0
        retried = 0
        for key, times in deliveries.items():
            times.sort()
            # Attempts rebound recorded (a failed one retried, R-4) explain as many deliveries;
            # only the deliveries beyond them need a SIGKILL or the crash.
            recorded = records.get(key, 0)
            if len(times) > 1 and len(times) <= recorded:
                retried += 1
                continue
            for first, second in zip(times, times[1:]):
                gap = second - first
                # The first delivery's holder died, or its record could not be written, between
                # the attempt's start (at most its 2 s timeout before) and the end of its lease.
                by_kill = any(first - 2.5 <= d <= first + LEASE_S for d in kills)
                by_db = any(first - 2.5 <= d <= first + LEASE_S for d in outage)
                if gap < LEASE_S - 1.5:
                    problems.append(f"{key}: delivered again {gap:.2f}s after the first, inside its {LEASE_S}s lease")
                elif by_kill:
                    explained_kill += 1
                elif by_db:
                    explained_db += 1
                else:
                    problems.append(f"{key}: delivered twice with no SIGKILL or crash near the first ({gap:.2f}s apart)")
        total_deliveries = len(seen)
        total_records = sum(records.values())
        refused_delivered = sum(1 for k in list(load.refused) + list(load.unanswered) if k in tasks)
        report.append(f"## {args.instances} instances via {args.via}, {args.seconds}s of hand-overs at {args.rate}/s, "
                      f"{len(victims)} SIGKILLed and restarted, the database crashed once")
        report.append("")
        report.append("| measure | value |")
        report.append("|---|---|")
        for name, value in [
            ("calls handed over", load.next_id),
            ("accepted (202)", len(load.accepted)),
            ("refused (503 store_unavailable and others)", len(load.refused)),
            ("unanswered (the instance was killed under it)", len(load.unanswered)),
            ("refused or unanswered but stored, so delivered (at least once)", refused_delivered),
            ("tasks stored / SUCCEEDED", f"{len(tasks)} / {sum(1 for s in tasks.values() if s == 'SUCCEEDED')}"),
            ("deliveries the upstream saw", total_deliveries),
            ("attempt records", total_records),
            ("keys delivered again by a recorded retry (an attempt rebound saw fail)", retried),
            ("failed attempts recorded, by error", ", ".join(f"{e or s}: {n}" for e, s, n in failed_attempts) or "none"),
            ("keys delivered twice: after a SIGKILL / after the crash", f"{explained_kill} / {explained_db}"),
            ("keys delivered twice without cause", sum(1 for p in problems if "twice" in p or "inside" in p)),
            ("accepted and lost", sum(1 for p in problems if "never delivered" in p)),
            ("drained (nothing PENDING or IN_FLIGHT) within the limit", "yes" if drained else "NO"),
            ("most database client connections seen", max_conns[0]),
            ("most client connections to PgBouncer seen", max_conns[1] if fleet.bouncer else "-"),
            ("claim statements (pg_stat_statements calls) / rows claimed", f"{calls} / {claimed_rows}"),
            ("mean claim statement execution (ms)", f"{claim_ms / calls:.3f}" if calls else "-"),
            ("database CPU (cores, mean over the run)", f"{db_cpu:.2f}"),
        ]:
            report.append(f"| {name} | {value} |")
        report.append("")
        report.append("Events: " + "; ".join(f"{at - t_start:.1f}s {what}" for at, what in events))
        report.append("")
        report.append(f"Claim plan {args.seconds * 0.2:.0f}s into the load (EXPLAIN ANALYZE of a 64-task claim, rolled back):")
        report.append("")
        report.append("```")
        report.append(plan_text or "")
        report.append("```")
        if problems:
            report.append("")
            report.append(f"VIOLATIONS ({len(problems)}):")
            report.extend(f"- {p}" for p in problems[:50])
        print("\n".join(report), flush=True)
        return 1 if problems or not drained else 0
    finally:
        fleet.close()


def steady(fleet, seconds, rate, prefix):
    """One measured spell: claims/s, rows per claim, CPU of the database, the bouncer, the fleet."""
    hz = os.sysconf("SC_CLK_TCK")
    calls0, rows0, ms0 = fleet.claim_stats()
    db0 = fleet.pg.cpu()
    pb0 = cpu_ticks(fleet.bouncer.pid) if fleet.bouncer else 0
    fl0 = sum(i.cpu() for i in fleet.instances)
    t0 = time.monotonic()
    if rate > 0:
        load = Load(fleet.instances, fleet.upstream.port, rate, prefix)
        load.run(seconds)
        fleet.wait_drained(60)
    else:
        load = None
        time.sleep(seconds)
    took = time.monotonic() - t0
    calls1, rows1, ms1 = fleet.claim_stats()
    calls, rows = calls1 - calls0, rows1 - rows0
    return {
        "claims_per_s": calls / took,
        "rows_per_claim": rows / calls if calls else 0,
        "claim_ms": (ms1 - ms0) / calls if calls else 0,
        "db_cpu": (fleet.pg.cpu() - db0) / hz / took,
        "bouncer_cpu": ((cpu_ticks(fleet.bouncer.pid) - pb0) / hz / took) if fleet.bouncer else 0,
        "fleet_cpu": (sum(i.cpu() for i in fleet.instances) - fl0) / hz / took,
        "accepted": len(load.accepted) if load else 0,
        "connections": fleet.connections(),
        "bouncer_clients": fleet.bouncer_clients(),
    }


def scaling(args):
    rows = []
    for n in [int(x) for x in args.instances_list.split(",")]:
        fleet = Fleet(args, n, args.via)
        try:
            time.sleep(2)
            busy = steady(fleet, args.seconds, args.rate, f"s{n}")
            idle = steady(fleet, args.idle, 0, f"i{n}")
            size = fleet.pg.query("SELECT pg_total_relation_size('retry_tasks')", "rebound")
            rows.append((n, busy, idle, int(size)))
            log(f"{n} instances: {busy} idle {idle}")
        finally:
            fleet.close()
    print(f"## What grows with the fleet (via {args.via}; {args.rate} hand-overs/s for {args.seconds}s, then "
          f"{args.idle}s idle; pool {args.pool}{', PgBouncer default_pool_size ' + str(args.server_pool) if args.via == 'pgbouncer' else ''})")
    print()
    print("| instances | database connections (PgBouncer clients) | claim statements/s loaded | rows per statement | ms per statement | database CPU loaded "
          "(cores) | claim statements/s idle | database CPU idle | PgBouncer CPU loaded | fleet CPU loaded | retry_tasks size |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, b, i, size in rows:
        print(f"| {n} | {b['connections']} ({b['bouncer_clients']}) | {b['claims_per_s']:.0f} | {b['rows_per_claim']:.2f} | {b['claim_ms']:.3f} | "
              f"{b['db_cpu']:.2f} | {i['claims_per_s']:.1f} | {i['db_cpu']:.3f} | {b['bouncer_cpu']:.2f} | "
              f"{b['fleet_cpu']:.2f} | {size / 1024:.0f} KiB |")
    return 0


def churn(args):
    fleet = Fleet(args, args.instances, args.via, retention=args.retention)
    try:
        settings = fleet.pg.query("SELECT reloptions FROM pg_class WHERE relname = 'retry_tasks'", "rebound")
        load = Load(fleet.instances, fleet.upstream.port, args.rate, "c")
        runner = threading.Thread(target=load.run, args=(args.minutes * 60,))
        runner.start()
        samples = []
        t0 = time.monotonic()
        while runner.is_alive():
            time.sleep(args.sample)
            row = fleet.pg.rows(
                "SELECT pg_relation_size('retry_tasks'), pg_total_relation_size('retry_tasks'), n_live_tup, n_dead_tup, "
                "autovacuum_count FROM pg_stat_user_tables WHERE relname = 'retry_tasks'")[0]
            samples.append((time.monotonic() - t0, *map(int, row)))
            log(f"churn {samples[-1]}")
        runner.join()
        print(f"## A hot queue table over {args.minutes} minutes: {args.instances} instances via {args.via}, "
              f"{args.rate} hand-overs/s, retention {args.retention}, autovacuum_naptime {args.naptime}, "
              f"table options {settings}")
        print()
        print("| minute | heap size | with indexes and TOAST | live rows | dead rows | autovacuum runs |")
        print("|---|---|---|---|---|---|")
        for t, heap, total, live, dead, av in samples:
            print(f"| {t / 60:.1f} | {heap / 1024:.0f} KiB | {total / 1024:.0f} KiB | {live} | {dead} | {av} |")
        return 0
    finally:
        fleet.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["chaos", "scaling", "churn"])
    p.add_argument("--instances", type=int, default=50)
    p.add_argument("--instances-list", default="1,10,50", help="scaling: the fleet sizes")
    p.add_argument("--via", choices=["pgbouncer", "direct"], default="pgbouncer")
    p.add_argument("--pool", type=int, default=1, help="store.pool of each instance")
    p.add_argument("--server-pool", type=int, default=10, help="PgBouncer's default_pool_size")
    p.add_argument("--rate", type=float, default=100, help="hand-overs per second")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--idle", type=float, default=15)
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--sample", type=float, default=30)
    p.add_argument("--retention", default="2m")
    p.add_argument("--naptime", default="1min", help="PostgreSQL's autovacuum_naptime (its default: 1min)")
    p.add_argument("--db-down", type=float, default=2.0, help="chaos: seconds the database stays down")
    p.add_argument("--drain", type=float, default=120, help="chaos: seconds allowed for delivering the rest")
    p.add_argument("--upstream-delay", type=float, default=0.02)
    p.add_argument("--fsync", action="store_true", help="PostgreSQL with fsync on (off: a test's throwaway server)")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--binary", default=os.environ.get("REBOUND_BIN", os.path.join(ROOT, "build", "rebound")))
    args = p.parse_args()
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"no rebound binary at {args.binary} (scripts/build)")
    log(f"seed {args.seed}")
    return {"chaos": chaos, "scaling": scaling, "churn": churn}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
