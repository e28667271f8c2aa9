"""What bench/run starts and watches: work directories, throwaway MariaDB servers (bench/lib.sh's
start_mariadb), sluice servers, etcd, moto, a rate-controlled writer, and a sampler of the Sluice
processes' RSS, CPU and metrics. Python standard library only."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HZ = os.sysconf("SC_CLK_TCK")
BIN = os.environ.get("SLUICE_BIN", str(REPO / "target/release/sluice"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loadavg():
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def proc_cpu(pid):
    """User + system CPU seconds of a process (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / HZ
    except (OSError, IndexError, ValueError):
        return None


def proc_mem(pid):
    """(VmRSS, VmHWM) in MiB, or None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    vals = {}
    for line in text.splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, val = line.split(":", 1)
            vals[key] = int(val.split()[0]) / 1024
    return vals.get("VmRSS", 0.0), vals.get("VmHWM", 0.0)


def pid_alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def terminate(pid, sig=signal.SIGTERM, wait=30.0):
    """Signals one process this harness started and waits until it is gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.time() + wait
    while pid_alive(pid) and time.time() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def http(method, url, body=None, timeout=30):
    """(status, parsed JSON or text) of one request; status 0 when it could not connect."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, None
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def parse_metrics(text):
    """Prometheus text -> [(name, {label: value}, float)]."""
    out = []
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        try:
            out.append((m.group(1), labels, float(m.group(3))))
        except ValueError:
            pass
    return out


def histogram(metrics, name, cf):
    """The cumulative buckets [(upper bound s, count)] of histogram `name` for changefeed `cf`
    in parsed metrics, ascending (+Inf last)."""
    b = [(float("inf") if lab["le"] == "+Inf" else float(lab["le"]), v)
         for n, lab, v in metrics if n == name + "_bucket" and lab.get("changefeed") == cf]
    return sorted(b)


def histogram_percentile(before, after, p):
    """The p-th percentile (0..100) of what a histogram counted between two readings of its
    cumulative buckets, interpolated linearly inside the bucket it falls in; None if nothing."""
    old = dict(before)
    delta = [(le, c - old.get(le, 0)) for le, c in after]
    total = delta[-1][1] if delta else 0
    if total <= 0:
        return None
    rank, lower, below = total * p / 100, 0.0, 0
    for le, c in delta:
        if c >= rank:
            if le == float("inf"):
                return lower
            inside = c - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1)
        lower, below = le, c
    return lower


def binlog_pos(file, pos):
    """The commit-ts form of a binlog position: file index * 2^32 + offset."""
    return int(file.rsplit(".", 1)[1]) * 2**32 + int(pos)


class Work:
    """A temporary directory and the processes started in it, all stopped by close()."""

    def __init__(self, name, keep=False):
        self.dir = Path(tempfile.mkdtemp(prefix=f"sluice-bench-{name}."))
        self.keep = keep
        self.pids = []  # (pid, signal to stop it with)

    def spawn(self, args, log, env=None, stop=signal.SIGTERM):
        f = open(self.dir / log, "ab")
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env={**os.environ, **(env or {})}, cwd=REPO)
        f.close()
        self.pids.append((p.pid, stop))
        return p

    def close(self):
        for pid, sig in reversed(self.pids):
            terminate(pid, sig)
        self.pids.clear()
        if self.keep:
            print(f"   kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class MariaDB:
    """A throwaway MariaDB with row binlog on a free port, started by bench/lib.sh's start_mariadb
    (user sluice / bench on 127.0.0.1 with every privilege)."""

    def __init__(self, work, name, extra=()):
        script = ('source bench/lib.sh; WORK=$1; shift; PIDS=(); '
                  'start_mariadb "$@" && echo "$PORT ${PIDS[-1]}"')
        r = subprocess.run(["bash", "-c", script, "bash", str(work.dir), *extra], cwd=REPO,
                           env={**os.environ, "DBNAME": name}, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"MariaDB {name} did not start: {r.stderr.strip()}")
        port, pid = r.stdout.split()[-2:]
        self.port, self.pid, self.name = int(port), int(pid), name
        work.pids.append((self.pid, signal.SIGTERM))
        self.cnf = work.dir / name / "my.cnf"
        self.sql("CREATE USER sluice@'127.0.0.1' IDENTIFIED BY 'bench'; "
                 "GRANT ALL ON *.* TO sluice@'127.0.0.1'")

    def client(self, *args):
        return ["mariadb", f"--defaults-file={self.cnf}", "-uroot", *args]

    def sql(self, query, db=None, timeout=None):
        """Runs statements; returns the rows as lists of strings (tab-separated output)."""
        args = self.client("-N", "-B", "-e", query) + ([db] if db else [])
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{self.name}: {r.stderr.strip()} (in: {query[:200]})")
        return [line.split("\t") for line in r.stdout.splitlines()]

    def feed(self, statements, db=None):
        """Pipes an iterable of SQL statements through one client session."""
        p = subprocess.Popen(self.client(*([db] if db else [])), stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for s in statements:
            p.stdin.write(s + ";\n")
        _, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"{self.name}: {err.strip()}")

    def position(self):
        """(file, pos) of SHOW MASTER STATUS."""
        f, pos = self.sql("SHOW MASTER STATUS")[0][:2]
        return f, int(pos)

    def binlog_bytes_since(self, file, pos):
        sizes = [(r[0], int(r[1])) for r in self.sql("SHOW BINARY LOGS")]
        names = [n for n, _ in sizes]
        i = names.index(file)
        return sum(s for _, s in sizes[i:]) - pos

    def url(self, path=""):
        return f"mysql://sluice:bench@127.0.0.1:{self.port}/{path}"

    def decode_seconds(self, file, pos):
        """MariaDB's C decoder over the binlog from (file, pos) to the end, read remotely as
        Sluice reads it: `mariadb-binlog --read-from-remote-server -v > /dev/null`."""
        args = ["mariadb-binlog", "--read-from-remote-server", "--host=127.0.0.1",
                f"--port={self.port}", "--user=sluice", "--password=bench",
                f"--start-position={pos}", "--to-last-log", "-v", file]
        t0 = time.time()
        r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb-binlog failed: {r.stderr.strip()}")
        return time.time() - t0


class Sluice:
    """One `sluice server` process and its HTTP API."""

    def __init__(self, work, name, upstream, etcd=None, config="", wait=True, binary=None):
        self.name = name
        self.addr = f"127.0.0.1:{free_port()}"
        self.base = f"http://{self.addr}"
        d = work.dir / name
        d.mkdir(parents=True, exist_ok=True)
        args = [binary or BIN, "server", "--addr", self.addr, "--data-dir", str(d / "data"),
                "--upstream", upstream]
        if etcd:
            args += ["--etcd", etcd]
        if config:
            (d / "server.toml").write_text(config)
            args += ["--config", str(d / "server.toml")]
        self.proc = work.spawn(args, f"{name}.log")
        self.pid = self.proc.pid
        self.log = work.dir / f"{name}.log"
        if wait:
            self.wait_healthy()

    def wait_healthy(self, seconds=90):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sluice {self.name} exited: {self.log_tail()}")
            if http("GET", self.base + "/api/v2/health", timeout=2)[0] == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"sluice {self.name} not healthy: {self.log_tail()}")

    def log_tail(self, n=15):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def api(self, method, path, body=None, ok=(200, 202)):
        status, v = http(method, self.base + path, body)
        if status not in ok:
            raise RuntimeError(f"{method} {path}: {status} {v}")
        return v

    def create(self, cf, sink, start_position=None, config=None):
        body = {"changefeed_id": cf, "sink_uri": sink}
        if start_position:
            body["start_position"] = f"{start_position[0]}:{start_position[1]}"
        if config:
            body["config"] = config
        return self.api("POST", "/api/v2/changefeeds", body)

    def pause(self, cf):
        self.api("POST", f"/api/v2/changefeeds/{cf}/pause")

    def remove(self, cf):
        self.api("DELETE", f"/api/v2/changefeeds/{cf}")

    def changefeed(self, cf):
        status, v = http("GET", f"{self.base}/api/v2/changefeeds/{cf}", timeout=5)
        return v if status == 200 and isinstance(v, dict) else None

    def metrics(self):
        status, text = http("GET", self.base + "/metrics", timeout=5)
        return parse_metrics(text if status == 200 and isinstance(text, str) else "")

    def metric(self, name, cf):
        return sum(v for n, lab, v in self.metrics() if n == name and lab.get("changefeed") == cf)

    def wait_replicating(self, cf, seconds=120):
        """Until every span of the changefeed is replicating (and there is one)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            status, v = http("GET", f"{self.base}/api/v2/changefeeds/{cf}/spans", timeout=5)
            items = v.get("items", []) if status == 200 and isinstance(v, dict) else []
            if items and all(s.get("state") == "replicating" for s in items):
                return
            time.sleep(0.2)
        raise RuntimeError(f"changefeed {cf} not replicating after {seconds} s")

    def wait_checkpoint(self, cf, target, seconds, poll=0.05):
        """Until checkpoint_ts >= target; returns the checkpoint (below target on timeout)."""
        deadline = time.time() + seconds
        cp = 0
        while time.time() < deadline:
            v = self.changefeed(cf)
            cp = (v or {}).get("checkpoint_ts") or 0
            if cp >= target:
                return cp
            time.sleep(poll)
        return cp

    def cpu(self):
        return proc_cpu(self.pid) or 0.0


class Etcd:
    def __init__(self, work):
        cp, pp = free_port(), free_port()
        self.url = f"http://127.0.0.1:{cp}"
        peer = f"http://127.0.0.1:{pp}"
        work.spawn(["etcd", "--name=bench", f"--data-dir={work.dir / 'etcd'}",
                    f"--listen-client-urls={self.url}", f"--advertise-client-urls={self.url}",
                    f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=bench={peer}", "--auto-compaction-mode=revision",
                    "--auto-compaction-retention=1000"], "etcd.log")
        deadline = time.time() + 30
        while time.time() < deadline:
            status, v = http("GET", self.url + "/health", timeout=2)
            if status == 200 and isinstance(v, dict) and v.get("health") == "true":
                return
            time.sleep(0.1)
        raise RuntimeError("etcd did not start")


class Moto:
    """moto_server (PyPI moto[server]) on a free port with one bucket."""

    def __init__(self, work, bucket):
        if not shutil.which("moto_server"):
            raise RuntimeError("moto_server not on PATH (scripts/install-deps.sh test installs it)")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        work.spawn(["moto_server", "-H", "127.0.0.1", "-p", str(self.port)], "moto.log")
        deadline = time.time() + 60
        while http("GET", self.endpoint + "/", timeout=2)[0] != 200:
            if time.time() > deadline:
                raise RuntimeError("moto_server did not start")
            time.sleep(0.2)
        status, v = http("PUT", f"{self.endpoint}/{bucket}")
        if status != 200:
            raise RuntimeError(f"creating bucket {bucket}: {status} {v}")

    def uri(self, bucket, prefix, params):
        return (f"s3://{bucket}/{prefix}?endpoint={self.endpoint}&force-path-style=true"
                f"&access-key=bench&secret-access-key=bench&{params}")


class Writer(threading.Thread):
    """Writes `rate` rows/s for `seconds` through one mariadb client session: every 5 ms the rows
    due so far, in statements of at most `batch` rows made by stmt(first_id, n). The upstream
    stamps each row itself (a NOW(6) default), so a writer that falls behind shows as lag, and
    the achieved rate is reported."""

    def __init__(self, db, rate, seconds, stmt, first_id=1, batch=None, extra=None, database=None):
        super().__init__(daemon=True)
        self.db, self.rate, self.seconds, self.stmt = db, rate, seconds, stmt
        self.next_id = first_id
        self.first_id = first_id
        self.batch = batch or max(1, rate // 200)
        self.extra = extra  # (interval s, fn(k) -> statement): e.g. a probe row
        self.database = database
        self.stop_now = threading.Event()
        self.rows = 0
        self.error = None
        self.t0 = self.t_end = None

    def run(self):
        p = subprocess.Popen(self.db.client(*([self.database] if self.database else [])),
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, bufsize=1 << 16)
        self.t0 = time.time()
        k = 0
        try:
            while not self.stop_now.is_set():
                el = time.time() - self.t0
                if el >= self.seconds:
                    break
                due = int(self.rate * el)
                parts = []
                while self.rows < due:
                    n = min(self.batch, due - self.rows)
                    parts.append(self.stmt(self.next_id, n) + ";\n")
                    self.next_id += n
                    self.rows += n
                if self.extra and el >= k * self.extra[0]:
                    parts.append(self.extra[1](k) + ";\n")
                    k += 1
                if parts:
                    p.stdin.write("".join(parts))
                    p.stdin.flush()
                time.sleep(0.005)
            _, err = p.communicate()
            if p.returncode != 0:
                self.error = err.strip()
        except (OSError, ValueError) as e:
            self.error = str(e)
            p.kill()
        finally:
            self.t_end = time.time()

    @property
    def last_id(self):
        return self.next_id - 1


class Sampler(threading.Thread):
    """Every `interval` s: RSS and CPU of the Sluice server processes (those given, plus any
    `sluice server` descended from `root`), their /metrics (rows the sinks wrote, checkpoint
    lag), and the load average. Phases (name, t0, t1) mark what ran when."""

    def __init__(self, t0, servers=(), root=None, interval=0.5, ignore_cf=("keep",)):
        super().__init__(daemon=True)
        self.t0, self.root, self.interval = t0, root, interval
        self.known = {}  # pid -> addr
        for s in servers:
            self.add(s)
        self.ignore = set(ignore_cf)
        self.samples = []
        self.phases = []
        self.cpu_last = {}
        self.hwm = {}
        self.prev_cf = {}
        self.stop_now = threading.Event()
        self.lock = threading.Lock()

    def add(self, server):
        self.known[server.pid] = server.addr

    def _descendants(self):
        if not self.root:
            return {}
        children = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
        found, todo = {}, [self.root]
        while todo:
            pid = todo.pop()
            for c in children.get(pid, []):
                todo.append(c)
                try:
                    argv = Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                args = [a.decode(errors="replace") for a in argv]
                names = {"sluice", os.path.basename(BIN)}
                if len(args) > 2 and os.path.basename(args[0]) in names and args[1] == "server":
                    addr = args[args.index("--addr") + 1] if "--addr" in args else None
                    found[c] = addr
        return found

    def sample(self):
        with self.lock:
            self.known.update(self._descendants())
            rss, rows, lag, per_cf = 0.0, 0.0, None, {}
            for pid, addr in list(self.known.items()):
                mem = proc_mem(pid)
                cpu = proc_cpu(pid)
                if mem is None or cpu is None or not pid_alive(pid):
                    continue
                rss += mem[0]
                self.hwm[pid] = max(self.hwm.get(pid, 0.0), mem[1], mem[0])
                self.cpu_last[pid] = cpu
                if addr:
                    status, text = http("GET", f"http://{addr}/metrics", timeout=2)
                    for n, lab, v in parse_metrics(text if status == 200 else ""):
                        if lab.get("changefeed") in self.ignore:
                            continue
                        if n == "sluice_sink_rows_total":
                            rows += v
                            key = (pid, lab.get("changefeed"))
                            per_cf[key] = per_cf.get(key, 0.0) + v
                        elif n == "sluice_changefeed_checkpoint_lag_seconds":
                            lag = v if lag is None else max(lag, v)
            now = time.time() - self.t0
            # rows/s since the last sample, per changefeed (one that is new starts from 0, one
            # removed since counts nothing), summed
            rate = None
            if self.samples:
                dt = now - self.samples[-1]["t"]
                grown = sum(max(0.0, v - self.prev_cf.get(k, 0.0)) for k, v in per_cf.items())
                rate = round(grown / dt, 1) if dt > 0 else None
            self.prev_cf = per_cf
            self.samples.append({"t": round(now, 3), "rss_mib": round(rss, 1),
                                 "cpu_s": round(sum(self.cpu_last.values()), 2), "rows": rows,
                                 "rows_per_s": rate, "lag_s": lag, "load1": loadavg()[0]})

    def run(self):
        while not self.stop_now.is_set():
            self.sample()
            self.stop_now.wait(self.interval)

    def stop(self):
        self.stop_now.set()
        self.join(5)
        self.sample()

    def cpu_now(self):
        """CPU seconds of every Sluice server seen so far (read now)."""
        with self.lock:
            for pid in self.known:
                c = proc_cpu(pid)
                if c is not None:
                    self.cpu_last[pid] = c
            return sum(self.cpu_last.values())

    def phase(self, name):
        sampler = self

        class Phase:
            def __enter__(self):
                self.t = time.time()
                return self

            def __exit__(self, *exc):
                sampler.phases.append({"name": name, "t0": round(self.t - sampler.t0, 3),
                                       "t1": round(time.time() - sampler.t0, 3)})
        return Phase()

    def lags_between(self, t0, t1):
        return [s["lag_s"] for s in self.samples if t0 <= s["t"] <= t1 and s["lag_s"] is not None]


def percentile(values, p):
    """The p-th percentile (0..100), nearest rank; None for no values."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(-(-p * len(v) // 100)) - 1))
    return v[k]
