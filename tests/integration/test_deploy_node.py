"""deploy/node/install.sh on this machine, offline: it creates the service user, a venv with the
package (a wheel of this checkout, dependencies reused from the test venv), the data dir, the
config, the launcher and kl-broker.service; a second run changes nothing; the launcher that
ExecStart names is the one `--no-systemd` runs, as the service user, and SIGTERM stops it cleanly.
Needs root (CI runs as root)."""

from __future__ import annotations

import base64
import configparser
import fnmatch
import hashlib
import importlib.metadata
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.timeout(600)
NODE = ROOT / "deploy" / "node"


def build_wheel(out_dir: Path, version: str | None = None) -> Path:
    """A wheel of this checkout, as `pip wheel .` would make it from setup.cfg (packages, metadata,
    console scripts), written directly: pip needs setuptools' bdist_wheel for that, which is not
    in the venv, and fetching it would need the network. `version` makes an upgrade's wheel."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    name, version = cfg["metadata"]["name"], version or cfg["metadata"]["version"]
    dist = f"{name.replace('-', '_')}-{version}"
    lines = lambda section, key: [x.strip() for x in cfg[section][key].splitlines() if x.strip()]  # noqa: E731
    include = lines("options.packages.find", "include")
    files: dict[str, bytes] = {}
    tops = sorted({pattern.split(".")[0] for pattern in include})
    for py in sorted(p for top in tops for p in (ROOT / top).rglob("*.py")):
        rel = py.relative_to(ROOT)
        package = ".".join(rel.parent.parts)
        if rel.parent.parts and any(fnmatch.fnmatchcase(package, pattern) for pattern in include):
            files[rel.as_posix()] = py.read_bytes()
    info = f"{dist}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Python: {cfg['options']['python_requires']}"]
    metadata += [f"Requires-Dist: {r}" for r in setup_requires()]
    files[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    scripts = lines("options.entry_points", "console_scripts")
    files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "\n".join(scripts) + "\n").encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    out = out_dir / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)
    return out


def setup_requires() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return [x.strip() for x in cfg["options"]["install_requires"].splitlines() if x.strip()]


def copy_deps(dest: Path) -> Path:
    """A site-packages directory with just the package's dependencies, copied from the test venv,
    for install.sh --deps-from: offline, and readable by the service user wherever the test venv
    lives."""
    todo = setup_requires()
    seen: set[str] = set()
    while todo:
        name = re.match(r"[A-Za-z0-9_.-]+", todo.pop()).group(0).lower()  # type: ignore[union-attr]
        if name in seen:
            continue
        seen.add(name)
        dist = importlib.metadata.distribution(name)
        for f in dist.files or []:
            src = Path(dist.locate_file(f))
            if src.is_file() and ".." not in f.parts:
                (dest / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / f)
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return dest


def clean_env() -> dict[str, str]:
    """The environment for install.sh and the brokers it starts: without the test's PYTHONPATH or
    venv, so the installed package is what runs."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def require_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root; these tests must run there")
        pytest.skip("install.sh creates users and system files: needs root (CI runs as root)")


def snapshot(root: Path) -> dict[str, tuple[str, int, int, int, int]]:
    """(content hash, mode, uid, gid, mtime) of every file and directory the install wrote, bar the
    venv's bytecode caches, to tell whether a second run changed anything."""
    out = {}
    for p in sorted(root.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
        out[str(p.relative_to(root))] = (digest, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns)
    return out


@pytest.fixture
def service_user() -> Iterator[str]:
    """A user name no one has; install.sh creates it, the test deletes it."""
    require_root()
    # The first free name from this process's id: a run killed before its clean-up (or a reused pid) can leave a
    # kltest user behind, and install.sh must create the user itself.
    name = next(
        n
        for n in (f"kltest{os.getpid() % 100000}{'' if i == 0 else f'x{i}'}" for i in range(100))
        if subprocess.run(["id", n], capture_output=True).returncode != 0
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def others_may_run(path: Path) -> bool:
    """Whether a user other than root can reach (o+x on every parent) and run (o+rx) path."""
    path = path.resolve()
    return all(p.stat().st_mode & 0o001 for p in path.parents) and path.stat().st_mode & 0o005 == 0o005


def user_python() -> str:
    """An interpreter the service user may run, of the test venv's Python version (the copied
    dependencies are built for it): the test venv's base interpreter may live under /root, which
    other users cannot enter; Debian's python3.11 may serve."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys._base_executable, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if Path(candidate).is_file() and others_may_run(Path(candidate)):
            return candidate
    pytest.fail(f"no Python {version} that other users may run (apt-get install python{version})")


def test_install_is_idempotent_and_runs_the_unit_command_line(service_user: str, tmp_path: Path) -> None:
    # A root other users can enter (pytest's tmp_path is private to root); removed at the end.
    root = Path(tempfile.mkdtemp(prefix="kl-install-", dir="/tmp"))
    root.chmod(0o755)
    proc: subprocess.Popen | None = None
    try:
        wheel = build_wheel(tmp_path)
        deps = copy_deps(root / "deps")
        port = free_port()
        # the cluster's secrets, as the operator makes them (deploy.sh --initial does)
        made = subprocess.run(
            ["bash", str(ROOT / "deploy/tls/cluster-secrets.sh"), str(tmp_path / "secrets"), "7=127.0.0.1"],
            capture_output=True,
            text=True,
        )
        assert made.returncode == 0, made.stderr
        secrets = tmp_path / "secrets" / "broker-7"
        args = ["bash", str(NODE / "install.sh"), "--root", str(root), "--id", "7", "--user", service_user]
        args += [
            "--peers",
            f"7@127.0.0.1:{port}",
            "--override",
            "num.partitions=2",
            "--override",
            "log.retention.ms=60000",
        ]
        args += ["--package", str(wheel), "--deps-from", str(deps), "--python", user_python()]
        args += ["--secrets-dir", str(secrets)]
        first = subprocess.run([*args, "--no-start"], capture_output=True, text=True, env=clean_env(), timeout=300)
        assert first.returncode == 0, first.stderr
        assert "changes" in first.stderr.splitlines()[-1]

        user = pwd.getpwnam(service_user)
        assert user.pw_shell == "/usr/sbin/nologin"
        state = root / "var/lib/kafkalite"
        for d in (state, state / "data"):
            st = d.stat()
            assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (user.pw_uid, user.pw_gid, 0o750)
        conf = root / "etc/kafkalite"
        props = (conf / "server.properties").read_text().splitlines()
        broker_password = (secrets / "broker.password").read_text().strip()
        admin_password = (secrets / "admin.password").read_text().strip()
        assert [p for p in props[1:] if not p.startswith("#")] == [
            "broker.id=7",
            "host=127.0.0.1",
            f"port={port}",
            f"log.dirs={state / 'data'}",
            "log.dirs.group.readable=true",  # the data dir stays 750 for the service's group
            f"peers=7@127.0.0.1:{port}",
            # the secure default: SASL_SSL everywhere, ACLs, admin and the brokers super users
            "security.protocol=SASL_SSL",
            "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="broker" password="{broker_password}";',
            f"ssl.keystore.location={conf}/secrets/broker.pem",
            f"ssl.truststore.location={conf}/secrets/ca.pem",
            "authorizer=acl",
            "super.users=User:admin;User:broker",
            "num.partitions=2",
            "log.retention.ms=60000",
        ]
        # secrets: root and the service user only; the admin's login root only
        for path, mode, gid in (
            (conf / "server.properties", 0o640, user.pw_gid),
            (conf / "secrets", 0o750, user.pw_gid),
            (conf / "secrets/broker.pem", 0o640, user.pw_gid),
            (conf / "secrets/broker.password", 0o640, user.pw_gid),
            (conf / "secrets/admin.password", 0o600, 0),
            (conf / "admin.properties", 0o600, 0),
        ):
            st = path.stat()
            assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, gid, mode), path
        assert f"sasl.password={admin_password}" in (conf / "admin.properties").read_text().splitlines()
        # the first users, salted (kl-broker format): no password is stored in the data dir
        records = (state / "data/bootstrap.records").read_text()
        assert records.count('"name": "admin"') == 2 and records.count('"name": "broker"') == 2
        assert admin_password not in records and broker_password not in records
        assert admin_password not in first.stderr and broker_password not in first.stderr
        launcher = root / "opt/kafkalite/bin/kl-broker-run"
        unit = (root / "etc/systemd/system/kl-broker.service").read_text()
        for line in (
            f"User={service_user}",
            f"ExecStart={launcher}",
            "Restart=on-failure",
            "LimitNOFILE=1048576",
            "KillSignal=SIGTERM",
            "TimeoutStopSec=60",
        ):
            assert f"\n{line}\n" in unit, line
        if shutil.which("systemd-analyze"):
            cp = subprocess.run(
                ["systemd-analyze", "verify", str(root / "etc/systemd/system/kl-broker.service")],
                capture_output=True,
                text=True,
            )
            assert cp.returncode == 0, cp.stderr
        venv_python = root / "opt/kafkalite/venv/bin/python"
        cp = subprocess.run(
            [
                venv_python,
                "-c",
                "import broker, importlib.metadata as m; print(broker.__file__, m.version('kafka-lite'))",
            ],
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=root,  # not the checkout, whose broker/ python -c would import first
        )
        module, version = cp.stdout.split()
        assert module.startswith(f"{root}/opt/kafkalite/venv/lib/") and version == "0.1.0", cp.stderr

        # Running it again, with the same arguments: nothing changes, not even an mtime.
        before = snapshot(root)
        again = subprocess.run([*args, "--no-start"], capture_output=True, text=True, env=clean_env(), timeout=300)
        assert again.returncode == 0, again.stderr
        assert "package unchanged" in again.stderr
        assert "0 changes" in again.stderr.splitlines()[-1]
        assert snapshot(root) == before

        # --no-systemd runs the unit's ExecStart, as the service user, in the foreground.
        proc = subprocess.Popen(
            [*args, "--no-systemd"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=clean_env(), text=True
        )
        deadline = time.monotonic() + 30
        pidfile = state / "kl-broker.pid"
        while time.monotonic() < deadline:
            try:
                # The launcher writes the pid file before it execs the broker: waiting for it too means the
                # answer on the port is this broker's, not another process's that took the port meanwhile.
                if not pidfile.exists():
                    raise OSError("no pid file yet")
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.1)
        else:
            raise AssertionError("the broker did not listen within 30 s")
        pid = int(pidfile.read_text())
        status = Path(f"/proc/{pid}/status").read_text()
        assert f"\nUid:\t{user.pw_uid}\t" in status  # running as the service user
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[1:5] == [
            str(root / "opt/kafkalite/venv/bin/kl-broker").encode(),
            b"start",
            b"--config",
            str(root / "etc/kafkalite/server.properties").encode(),
        ]
        # the service user could write its data dir
        assert {p.stat().st_uid for p in (state / "data").rglob("*")} == {user.pw_uid}
        # TLS and a SCRAM login as admin (the node scripts' way in), and nothing without them
        topics = [str(root / "opt/kafkalite/venv/bin/kl-topics"), "--bootstrap-server", f"127.0.0.1:{port}"]
        admin = ["--command-config", str(conf / "admin.properties")]
        created = subprocess.run(
            [*topics, *admin, "--create", "--topic", "secured", "--partitions", "1", "--replication-factor", "1"],
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=root,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        listed = subprocess.run([*topics, *admin, "--list"], capture_output=True, text=True, env=clean_env(), cwd=root)
        assert listed.stdout.split() == ["secured"], listed.stderr
        (tmp_path / "plain.properties").write_text("request.timeout.ms=3000\n")
        plain = subprocess.run(
            [*topics, "--command-config", str(tmp_path / "plain.properties"), "--list"],
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=root,
            timeout=60,
        )
        assert plain.returncode != 0 and "secured" not in plain.stdout
        # a clean stop with SIGTERM, as systemd's KillSignal sends it
        os.kill(pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "shut down cleanly" in out
        check_spark_next_to_the_broker(root, state, user)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for name in ("kl-spark-worker.pid", "kl-spark-master.pid"):
            pidfile = root / "var/lib/kafkalite" / name
            if pidfile.exists():
                subprocess.run(["kill", "-TERM", pidfile.read_text().strip()], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def check_spark_next_to_the_broker(root: Path, state: Path, user: pwd.struct_passwd) -> None:
    """deploy/node/spark.sh on the installed host: units, then a master and a worker as the service user whose
    executors are told the broker's data dir; a second run changes nothing and restarts nothing."""
    port = free_port()
    spark = ["bash", str(NODE / "spark.sh"), "--root", str(root), "--master", f"spark://127.0.0.1:{port}"]
    spark += ["--run-master", "--cores", "1", "--memory", "512m", "--webui-ports", "0,0"]
    units = subprocess.run([*spark, "--no-start"], capture_output=True, text=True, env=clean_env(), timeout=300)
    assert units.returncode == 0, units.stderr
    for name, launcher in (
        ("kl-spark-master.service", "kl-spark-master-run"),
        ("kl-spark-worker.service", "kl-spark-worker-run"),
    ):
        unit = (root / "etc/systemd/system" / name).read_text()
        assert f"\nUser={user.pw_name}\n" in unit and f"\nExecStart={root}/opt/kafkalite/bin/{launcher}\n" in unit
    env = (root / "etc/kafkalite/spark-env.sh").read_text()
    assert f"export KAFKALITE_DATA_DIR={state / 'data'}" in env.splitlines()
    started = subprocess.run([*spark, "--no-systemd"], capture_output=True, text=True, env=clean_env(), timeout=300)
    assert started.returncode == 0, started.stderr
    worker_log = state / "spark-worker.log"
    deadline = time.monotonic() + 90
    while "Successfully registered with master" not in (worker_log.read_text() if worker_log.exists() else ""):
        assert time.monotonic() < deadline, (state / "spark-master.log").read_text()[-2000:] + worker_log.read_text()[
            -2000:
        ]
        time.sleep(0.3)
    pids = {name: int((state / f"{name}.pid").read_text()) for name in ("kl-spark-master", "kl-spark-worker")}
    for pid in pids.values():
        assert f"\nUid:\t{user.pw_uid}\t" in Path(f"/proc/{pid}/status").read_text()
        # the JVM that the launcher exec'ed carries the broker's data dir to the executors it starts
        assert f"KAFKALITE_DATA_DIR={state / 'data'}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    again = subprocess.run([*spark, "--no-systemd"], capture_output=True, text=True, env=clean_env(), timeout=300)
    assert again.returncode == 0 and "0 changes" in again.stderr.splitlines()[-1], again.stderr
    assert {name: int((state / f"{name}.pid").read_text()) for name in pids} == pids


def test_zookeeper_mode_sets_up_the_ensemble_server_and_the_broker_idempotently(
    service_user: str, tmp_path: Path
) -> None:
    """--coordination zookeeper: the host the ensemble list names gets a ZooKeeper server (zoo.cfg,
    myid, launcher, kl-zookeeper.service) and the broker the two server.properties keys; a host not
    in the list only the keys. Nothing is started here (test_deploy_netns.py runs an ensemble)."""
    peers = ",".join(f"{i}@198.18.9.{i}:9092" for i in (1, 2, 3, 4))
    servers = "1=198.18.9.1,2=198.18.9.2,3=198.18.9.3"
    connect = "198.18.9.1:2181,198.18.9.2:2181,198.18.9.3:2181"
    roots = [Path(tempfile.mkdtemp(prefix="kl-install-zk-", dir="/tmp")) for _ in range(2)]
    try:
        zk_root, broker_root = roots

        def install(root: Path, broker_id: int, *extra: str) -> subprocess.CompletedProcess:
            args = ["bash", str(NODE / "install.sh"), "--root", str(root), "--id", str(broker_id)]
            args += ["--user", service_user, "--python", user_python(), "--peers", peers]
            args += ["--coordination", "zookeeper", "--zookeeper-servers", servers, "--no-start", "--insecure", *extra]
            cp = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=300)
            assert cp.returncode == 0, cp.stderr
            return cp

        install(zk_root, 2)
        user = pwd.getpwnam(service_user)
        props = (zk_root / "etc/kafkalite/server.properties").read_text().splitlines()
        # broker/server/config.py's keys (kl-broker start --coordination zookeeper --zookeeper ...)
        assert props[-2:] == ["coordination=zookeeper", f"zookeeper.connect={connect}"]
        # --insecure: today's plaintext, no secrets anywhere
        assert not any(p.startswith(("security.", "sasl.", "ssl.", "authorizer")) for p in props)
        assert (zk_root / "etc/kafkalite/server.properties").stat().st_mode & 0o777 == 0o644
        assert not (zk_root / "etc/kafkalite/secrets").exists()
        zk_data = zk_root / "var/lib/kafkalite/zookeeper"
        cfg = (zk_root / "etc/kafkalite/zookeeper/zoo.cfg").read_text().splitlines()
        for line in (
            "tickTime=1000",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={zk_data}",
            "clientPort=2181",
            "server.1=198.18.9.1:2888:3888",
            "server.2=198.18.9.2:2888:3888",
            "server.3=198.18.9.3:2888:3888",
        ):
            assert line in cfg, line
        assert (zk_data / "myid").read_text() == "2\n"
        st = zk_data.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (user.pw_uid, user.pw_gid, 0o750)
        launcher = zk_root / "opt/kafkalite/bin/kl-zookeeper-run"
        assert (
            launcher.read_text()
            .splitlines()[-1]
            .endswith(f"org.apache.zookeeper.server.quorum.QuorumPeerMain {zk_root}/etc/kafkalite/zookeeper/zoo.cfg")
        )
        units = zk_root / "etc/systemd/system"
        zk_unit = (units / "kl-zookeeper.service").read_text()
        for line in (f"User={service_user}", f"ExecStart={launcher}", "Restart=on-failure", "SuccessExitStatus=143"):
            assert f"\n{line}\n" in zk_unit, line
        # the broker starts after this host's ZooKeeper server, and stops before it
        assert "\nAfter=network-online.target kl-zookeeper.service\n" in (units / "kl-broker.service").read_text()
        if shutil.which("systemd-analyze"):
            cp = subprocess.run(
                ["systemd-analyze", "verify", str(units / "kl-zookeeper.service"), str(units / "kl-broker.service")],
                capture_output=True,
                text=True,
            )
            assert cp.returncode == 0, cp.stderr
        # node.env keeps the settings for --reuse-config
        cp = subprocess.run(
            [
                "bash",
                "-c",
                'source "$1"; echo "$KL_COORDINATION $KL_ZK_SERVERS"',
                "_",
                zk_root / "etc/kafkalite/node.env",
            ],
            capture_output=True,
            text=True,
        )
        assert cp.stdout == f"zookeeper {servers}\n", cp.stderr

        # The same arguments again, then --reuse-config (what deploy.sh and upgrade.sh run): no change.
        before = snapshot(zk_root)
        assert "0 changes" in install(zk_root, 2).stderr.splitlines()[-1]
        again = subprocess.run(
            ["bash", str(NODE / "install.sh"), "--root", str(zk_root), "--reuse-config", "--no-start"],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=300,
        )
        assert again.returncode == 0 and "0 changes" in again.stderr.splitlines()[-1], again.stderr
        assert snapshot(zk_root) == before

        # Broker 4's address is not in the ensemble: the broker side only.
        install(broker_root, 4)
        props = (broker_root / "etc/kafkalite/server.properties").read_text().splitlines()
        assert props[-2:] == ["coordination=zookeeper", f"zookeeper.connect={connect}"]
        assert not (broker_root / "etc/kafkalite/zookeeper").exists()
        assert not (broker_root / "var/lib/kafkalite/zookeeper").exists()
        assert not (broker_root / "opt/kafkalite/bin/kl-zookeeper-run").exists()
        assert sorted(p.name for p in (broker_root / "etc/systemd/system").iterdir()) == ["kl-broker.service"]
        assert "\nAfter=network-online.target\n" in (broker_root / "etc/systemd/system/kl-broker.service").read_text()

        # An open cluster's inter-broker secret (deploy/tls/inter-broker-secret.sh makes it): taken in for the
        # service user only, named in server.properties, kept by --reuse-config; a short one is refused.
        made = subprocess.run(
            ["bash", str(NODE.parent / "tls/inter-broker-secret.sh"), str(broker_root / "operator")],
            capture_output=True,
            text=True,
        )
        assert made.returncode == 0, made.stderr
        given = Path(made.stdout.strip())
        install(broker_root, 4, "--inter-broker-secret", str(given))
        taken = broker_root / "etc/kafkalite/inter-broker.secret"
        st = taken.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (user.pw_uid, 0o600)
        assert taken.read_text() == given.read_text() and len(given.read_text().strip()) >= 40
        props = (broker_root / "etc/kafkalite/server.properties").read_text().splitlines()
        assert props[-1] == f"inter.broker.secret.file={taken}"

        def reinstall(*extra: str) -> subprocess.CompletedProcess:
            args = ["bash", str(NODE / "install.sh"), "--root", str(broker_root), "--reuse-config", "--no-start"]
            return subprocess.run([*args, *extra], capture_output=True, text=True, env=clean_env(), timeout=300)

        again = reinstall()
        assert again.returncode == 0 and "0 changes" in again.stderr.splitlines()[-1], again.stderr
        short = broker_root / "short.secret"
        short.write_text("too-short\n")
        refused = reinstall("--inter-broker-secret", str(short))
        assert refused.returncode != 0 and "at least 16 characters" in refused.stderr
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
