"""The deploy scripts without a cloud: shellcheck on every deploy/**/*.sh, `--help` on each, and the
exact az/ssh/scp commands that `--dry-run` prints (NSG rules, VMs, cloud-init custom data, the
rolling upgrade order). az, ssh and scp are stubs here that record any call, so a dry run that ran
one would fail the test; nothing leaves this machine."""

from __future__ import annotations

import base64
import gzip
import os
import re
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(120)

DEPLOY = ROOT / "deploy"
AZURE = DEPLOY / "azure"
NODE = DEPLOY / "node"
NODE_SCRIPTS = ["common.sh", "install.sh", "upgrade.sh", "wait-isr.sh", "status.sh", "spark.sh"]
# Printed only, never contacted: the documentation ranges (RFC 5737) and Azure-internal names.
SSH_SOURCE = "203.0.113.7/32"
PEERS = "1@10.42.1.11:9192,2@10.42.1.12:9192,3@10.42.1.13:9192"


def all_scripts() -> list[Path]:
    return sorted(DEPLOY.rglob("*.sh"))


def test_shellcheck_is_clean() -> None:
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is missing in CI (scripts/_env.sh installs it: apt-get install -y shellcheck)")
        pytest.skip("shellcheck not installed (apt-get install -y shellcheck)")
    scripts = all_scripts()
    assert len(scripts) >= 9
    cp = subprocess.run(["shellcheck", "-x", *map(str, scripts)], capture_output=True, text=True, cwd=ROOT)
    assert cp.returncode == 0, cp.stdout + cp.stderr


@pytest.mark.parametrize("script", [p.relative_to(ROOT).as_posix() for p in all_scripts() if p.name != "common.sh"])
def test_every_script_is_strict_and_has_help(script: str) -> None:
    text = (ROOT / script).read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "\nset -euo pipefail\n" in text
    assert os.access(ROOT / script, os.X_OK), f"{script} is not executable"
    cp = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith("Usage: ")


# --- the operator's side, dry run -------------------------------------------------------------------


class Operator:
    """A config file, stub az/ssh/scp that record calls, and a way to run the deploy/azure scripts."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.build = tmp / "build"
        self.calls = tmp / "stub-calls"
        self.stubs = tmp / "bin"
        self.stubs.mkdir()
        for tool in ("az", "ssh", "scp"):
            stub = self.stubs / tool
            stub.write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >>{shlex.quote(str(self.calls))}\n')
            stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
        self.key = tmp / "id_test"
        self.config = tmp / "cluster.env"
        self.write_config()

    def write_config(self, **changes: str) -> None:
        values = {
            "RESOURCE_GROUP": "kl-test-rg",
            "LOCATION": "northeurope",
            "VM_SIZE": "Standard_B2s",
            "VM_COUNT": "3",
            "ADMIN_USER": "kladmin",
            "ALLOWED_SSH_SOURCE": SSH_SOURCE,
            "BROKER_PORT": "9192",
            "COORDINATION": "custom",
            "SSH_PUBLIC_KEY": f"{self.key}.pub",
            "SSH_PRIVATE_KEY": str(self.key),
            "BUILD_DIR": str(self.build),
            "BROKER_OVERRIDES": "'default.replication.factor=3 min.insync.replicas=2'",
        }
        values.update(changes)
        self.config.write_text("".join(f"{k}={v}\n" for k, v in values.items()))

    def run(self, script: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
        env = {**os.environ, "PATH": f"{self.stubs}:{os.environ['PATH']}", "HOME": str(self.tmp)}
        return subprocess.run(
            ["bash", str(AZURE / script), "--config", str(self.config), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    def commands(self, script: str, *args: str) -> list[str]:
        """The "+ ..." lines of a dry run; it must not have called any stub."""
        cp = self.run(script, "--dry-run", *args)
        assert cp.returncode == 0, cp.stderr
        assert not self.calls.exists(), f"a dry run called {self.calls.read_text()}"
        assert "dry run" in cp.stderr
        lines = cp.stdout.splitlines()
        assert all(line.startswith("+ ") for line in lines), cp.stdout
        return [line[2:] for line in lines]

    def ssh(self, vm: int, remote: list[str] | str) -> str:
        host = f"kladmin@kl-kl-test-rg-{vm}.northeurope.cloudapp.azure.com"
        remote_line = remote if isinstance(remote, str) else shlex.join(remote)
        return shlex.join(["ssh", *self.ssh_opts(), host, remote_line])

    def ssh_opts(self) -> list[str]:
        return [
            "-i",
            str(self.key),
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            "ConnectTimeout=15",
            "-o",
            "ServerAliveInterval=30",
            "-o",
            "BatchMode=yes",
        ]


@pytest.fixture
def operator(tmp_path: Path) -> Operator:
    return Operator(tmp_path)


def az(*args: str) -> str:
    return shlex.join(["az", *args])


def nsg_rule(name: str, priority: int, access: str, protocol: str, source: str, *ports: str) -> str:
    return az(
        "network",
        "nsg",
        "rule",
        "create",
        "--resource-group",
        "kl-test-rg",
        "--nsg-name",
        "kl-nsg",
        "--name",
        name,
        "--priority",
        str(priority),
        "--direction",
        "Inbound",
        "--access",
        access,
        "--protocol",
        protocol,
        "--source-address-prefixes",
        source,
        "--source-port-ranges",
        "*",
        "--destination-address-prefixes",
        "*",
        "--destination-port-ranges",
        *ports,
        "--output",
        "none",
    )


def provision_commands(operator: Operator, vms: int = 3, zookeeper: int = 0) -> list[str]:
    """What `provision.sh --dry-run` prints for `vms` VMs, the first `zookeeper` of them ZooKeeper
    servers (0: COORDINATION=custom)."""
    rg = ["--resource-group", "kl-test-rg"]
    zk_ports = ("2181", "2888", "3888")
    expected = [
        az("group", "create", "--name", "kl-test-rg", "--location", "northeurope", "--output", "none"),
        az("network", "nsg", "create", *rg, "--location", "northeurope", "--name", "kl-nsg", "--output", "none"),
        # ssh only from the operator's address; the broker port (and ZooKeeper's) only from inside the vnet
        nsg_rule("allow-ssh-from-operator", 100, "Allow", "Tcp", SSH_SOURCE, "22"),
        nsg_rule("allow-broker-from-vnet", 110, "Allow", "Tcp", "VirtualNetwork", "9192"),
        *(
            [nsg_rule("allow-zookeeper-from-vnet", 120, "Allow", "Tcp", "VirtualNetwork", *zk_ports)]
            if zookeeper
            else []
        ),
        nsg_rule("deny-ssh-from-elsewhere", 4000, "Deny", "*", "*", "22"),
        nsg_rule("deny-broker-from-elsewhere", 4010, "Deny", "*", "*", "9192"),
        *([nsg_rule("deny-zookeeper-from-elsewhere", 4020, "Deny", "*", "*", *zk_ports)] if zookeeper else []),
        az("network", "vnet", "create", *rg, "--location", "northeurope", "--name", "kl-vnet")
        + " --address-prefixes 10.42.0.0/16 --output none",
        az("network", "vnet", "subnet", "create", *rg, "--vnet-name", "kl-vnet", "--name", "kl-subnet")
        + " --address-prefixes 10.42.1.0/24 --network-security-group kl-nsg --output none",
    ]
    for i in range(1, vms + 1):
        expected.append(
            az(
                "vm",
                "create",
                *rg,
                "--location",
                "northeurope",
                "--name",
                f"kl-{i}",
                "--image",
                "Canonical:ubuntu-24_04-lts:server:latest",
                "--size",
                "Standard_B2s",
                "--admin-username",
                "kladmin",
                "--authentication-type",
                "ssh",
                "--ssh-key-values",
                f"{operator.key}.pub",
                "--vnet-name",
                "kl-vnet",
                "--subnet",
                "kl-subnet",
                "--private-ip-address",
                f"10.42.1.{10 + i}",
                "--nsg",
                "",
                "--public-ip-address",
                f"kl-{i}-ip",
                "--public-ip-sku",
                "Standard",
                "--public-ip-address-allocation",
                "static",
                "--public-ip-address-dns-name",
                f"kl-kl-test-rg-{i}",
                "--custom-data",
                str(operator.build / f"cloud-init-kl-{i}.yaml"),
                "--tags",
                "role=kafkalite-broker",
                f"broker-id={i}",
                *([f"zookeeper-id={i}"] if i <= zookeeper else []),
                "--output",
                "none",
            )
        )
    return expected


def test_provision_dry_run_prints_the_exact_az_commands(operator: Operator) -> None:
    assert operator.commands("provision.sh") == provision_commands(operator)


def parse_cloud_init(text: str) -> tuple[dict[str, bytes], list[str]]:
    """(path -> decoded content of write_files, the runcmd argv) of the cloud-init that provision.sh
    writes; a small parser for exactly that layout (no YAML library in the venv)."""
    files: dict[str, bytes] = {}
    for path, encoding, content in re.findall(
        r"^  - path: (\S+)\n    permissions: \"0755\"\n    encoding: (\S+)\n    content: (\S+)$", text, re.M
    ):
        assert encoding == "gz+b64"
        files[path] = gzip.decompress(base64.b64decode(content))
    (runcmd,) = re.findall(r"^runcmd:\n  - \[(.*)\]$", text, re.M)
    argv = re.findall(r'"([^"]*)"', runcmd)
    return files, argv


def test_provision_cloud_init_runs_the_node_installer_with_id_and_peers(operator: Operator) -> None:
    operator.commands("provision.sh")
    for i in (1, 2, 3):
        text = (operator.build / f"cloud-init-kl-{i}.yaml").read_text()
        assert text.startswith("#cloud-config\n")
        assert "packages:\n  - python3-venv\n" in text
        # Azure's limit for custom data is 64 KiB
        assert len(text.encode()) < 64 * 1024
        files, argv = parse_cloud_init(text)
        assert files == {f"/opt/kafkalite-bootstrap/{f}": (NODE / f).read_bytes() for f in NODE_SCRIPTS}
        assert argv == [
            "bash",
            "/opt/kafkalite-bootstrap/install.sh",
            "--id",
            str(i),
            "--peers",
            PEERS,
            "--coordination",
            "custom",
            "--override",
            "default.replication.factor=3",
            "--override",
            "min.insync.replicas=2",
        ]


def test_provision_opens_the_metrics_port_to_the_vnet_and_sets_it(operator: Operator) -> None:
    # METRICS_PORT (cluster.env's default 9404): each broker's Prometheus listener, reachable from the
    # vnet only, as the broker port; server.properties gets metrics.port through install.sh --override
    operator.write_config(METRICS_PORT="9404")
    cmds = operator.commands("provision.sh")
    base = provision_commands(operator)
    allow = nsg_rule("allow-metrics-from-vnet", 115, "Allow", "Tcp", "VirtualNetwork", "9404")
    deny = nsg_rule("deny-metrics-from-elsewhere", 4015, "Deny", "*", "*", "9404")
    assert cmds == [
        *base[:4],
        allow,
        *base[4:6],
        deny,
        *base[6:],
    ]
    _, argv = parse_cloud_init((operator.build / "cloud-init-kl-1.yaml").read_text())
    assert argv[-8:] == [
        "--override",
        "metrics.port=9404",
        "--override",
        "metrics.host=0.0.0.0",
        "--override",
        "default.replication.factor=3",
        "--override",
        "min.insync.replicas=2",
    ]
    for bad in ("9192", "70000", "x"):
        operator.write_config(METRICS_PORT=bad)
        cp = operator.run("provision.sh", "--dry-run")
        assert cp.returncode != 0 and "METRICS_PORT must be a port number" in cp.stderr


def test_provision_in_zookeeper_mode(operator: Operator) -> None:
    # five brokers, the first three of which run the ZooKeeper ensemble
    operator.write_config(COORDINATION="zookeeper", VM_COUNT="5", ZOOKEEPER_COUNT="3")
    assert operator.commands("provision.sh") == provision_commands(operator, vms=5, zookeeper=3)
    peers = ",".join(f"{i}@10.42.1.{10 + i}:9192" for i in range(1, 6))
    for i in range(1, 6):
        _, argv = parse_cloud_init((operator.build / f"cloud-init-kl-{i}.yaml").read_text())
        # the same ensemble on every VM: install.sh runs server i where the list names its address
        assert argv == [
            "bash",
            "/opt/kafkalite-bootstrap/install.sh",
            "--id",
            str(i),
            "--peers",
            peers,
            "--coordination",
            "zookeeper",
            "--zookeeper-servers",
            "1=10.42.1.11,2=10.42.1.12,3=10.42.1.13",
            "--override",
            "default.replication.factor=3",
            "--override",
            "min.insync.replicas=2",
        ]
    # the default: three servers (one for fewer than three VMs)
    operator.write_config(COORDINATION="zookeeper")
    assert operator.commands("provision.sh") == provision_commands(operator, zookeeper=3)
    operator.write_config(COORDINATION="zookeeper", VM_COUNT="1")
    assert operator.commands("provision.sh") == provision_commands(operator, vms=1, zookeeper=1)
    _, argv = parse_cloud_init((operator.build / "cloud-init-kl-1.yaml").read_text())
    assert argv[-6:-4] == ["--zookeeper-servers", "1=10.42.1.11"]


def test_provision_with_a_package_and_ssh_hosts(operator: Operator) -> None:
    # SSH_HOSTS (a VPN or bastion) means no public addresses; PACKAGE is installed at first boot
    operator.write_config(SSH_HOSTS="'a.internal b.internal c.internal'", PACKAGE="kafka-lite==0.1.0")
    got = operator.commands("provision.sh")
    vm1 = [c for c in got if c.startswith("az vm create") and "--name kl-1 " in c]
    assert len(vm1) == 1
    assert "--public-ip-address '' --custom-data" in vm1[0]
    assert "--public-ip-address-dns-name" not in vm1[0]
    _, argv = parse_cloud_init((operator.build / "cloud-init-kl-1.yaml").read_text())
    assert argv[-2:] == ["--package", "kafka-lite==0.1.0"]
    status = operator.commands("status.sh", "--vm", "3")
    assert status == [
        shlex.join(["ssh", *operator.ssh_opts(), "kladmin@c.internal", "sudo bash /opt/kafkalite/node/status.sh"])
    ]


def copy_commands(operator: Operator, wheel: str) -> list[str]:
    remote_dir = "/home/kladmin/kafkalite-deploy"
    out = []
    for i in (1, 2, 3):
        out.append(operator.ssh(i, f"rm -rf {remote_dir} && mkdir -p {remote_dir}"))
        out.append(
            shlex.join(
                [
                    "scp",
                    "-q",
                    *operator.ssh_opts(),
                    wheel,
                    *(str(NODE / f) for f in NODE_SCRIPTS),
                    f"kladmin@kl-kl-test-rg-{i}.northeurope.cloudapp.azure.com:{remote_dir}/",
                ]
            )
        )
    return out


def test_deploy_dry_run_builds_copies_and_upgrades_one_broker_at_a_time(operator: Operator) -> None:
    got = operator.commands("deploy.sh", "--timeout", "120")
    dist = operator.build / "dist"
    wheel = str(dist / "kafka_lite-0.1.0-py3-none-any.whl")
    remote_wheel = "/home/kladmin/kafkalite-deploy/kafka_lite-0.1.0-py3-none-any.whl"
    expected = [
        shlex.join(["rm", "-rf", str(dist)]),
        shlex.join(["python3", "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(ROOT)]),
        *copy_commands(operator, wheel),
        # one VM at a time; upgrade.sh returns only once that broker is back in every ISR
        *(
            operator.ssh(
                i,
                ["sudo", "bash", "/home/kladmin/kafkalite-deploy/upgrade.sh", "--package", remote_wheel]
                + ["--timeout", "120"],
            )
            for i in (1, 2, 3)
        ),
        operator.ssh(1, ["sudo", "bash", "/home/kladmin/kafkalite-deploy/status.sh"]),
    ]
    assert got == expected


def initial_commands(operator: Operator, wheel: Path, secure: bool) -> list[str]:
    """What `deploy.sh --initial --wheel WHEEL` runs: with SASL_SSL, the secrets made here first, then
    each VM gets its own over scp into a 0700 directory that is deleted right after install.sh."""
    remote_dir = "/home/kladmin/kafkalite-deploy"
    remote_wheel = f"{remote_dir}/{wheel.name}"
    secrets = operator.tmp / ".kafkalite" / "kl-test-rg"  # ~/.kafkalite/RESOURCE_GROUP
    expected = copy_commands(operator, str(wheel))
    if secure:
        specs = [f"{i}=10.42.1.{10 + i},kl-{i}" for i in (1, 2, 3)]
        expected.append(shlex.join(["bash", str(DEPLOY / "tls/cluster-secrets.sh"), str(secrets), *specs]))
    else:  # an open cluster still gets its inter-broker secret, made here and sent the same way
        expected.append(shlex.join(["bash", str(DEPLOY / "tls/inter-broker-secret.sh"), str(secrets)]))
    install = ["sudo", "bash", f"{remote_dir}/install.sh", "--reuse-config", "--package", remote_wheel]
    for i in (1, 2, 3):
        expected.append(operator.ssh(i, ["cloud-init", "status", "--wait"]))
        expected.append(operator.ssh(i, f"install -d -m 700 {remote_dir}/secrets"))
        if secure:
            names = ("ca.pem", "broker.pem", "admin.password", "broker.password")
            files = [str(secrets / f"broker-{i}" / f) for f in names]
            taken = ["--secrets-dir", f"{remote_dir}/secrets"]
        else:
            files = [str(secrets / "inter-broker.secret")]
            taken = ["--insecure", "--inter-broker-secret", f"{remote_dir}/secrets/inter-broker.secret"]
        host = f"kladmin@kl-kl-test-rg-{i}.northeurope.cloudapp.azure.com"
        expected.append(shlex.join(["scp", "-q", *operator.ssh_opts(), *files, f"{host}:{remote_dir}/secrets/"]))
        expected.append(
            operator.ssh(i, shlex.join([*install, *taken]) + f"; rc=$?; rm -rf {remote_dir}/secrets; exit $rc")
        )
    wait = ["sudo", "bash", f"{remote_dir}/wait-isr.sh", "--until", "healthy", "--timeout", "600"]
    expected.append(operator.ssh(1, wait))
    expected.append(operator.ssh(1, ["sudo", "bash", f"{remote_dir}/status.sh"]))
    return expected


def test_deploy_initial_dry_run_installs_everywhere_then_waits(operator: Operator, tmp_path: Path) -> None:
    wheel = tmp_path / "kafka_lite-9.9-py3-none-any.whl"
    got = operator.commands("deploy.sh", "--initial", "--wheel", str(wheel))
    assert got == initial_commands(operator, wheel, secure=True)
    assert not (operator.tmp / ".kafkalite").exists()  # a dry run makes no secrets either
    got = operator.commands("deploy.sh", "--initial", "--wheel", str(wheel), "--insecure")
    assert got == initial_commands(operator, wheel, secure=False)


def test_deploy_initial_keeps_the_secrets_on_the_operators_machine(operator: Operator, tmp_path: Path) -> None:
    """Not a dry run (ssh and scp are stubs): the CA, certificates and passwords are made in
    ~/.kafkalite/RESOURCE_GROUP (0700, outside the repository), each VM is sent only its own, and
    nothing secret is in the cloud-init files."""
    wheel = tmp_path / "kafka_lite-9.9-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    operator.commands("provision.sh")
    cp = operator.run("deploy.sh", "--initial", "--wheel", str(wheel))
    assert cp.returncode == 0, cp.stderr
    secrets = operator.tmp / ".kafkalite" / "kl-test-rg"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    for f in ("ca.key", "admin.password", "broker.password", "broker-1.pem"):
        assert stat.S_IMODE((secrets / f).stat().st_mode) == 0o600, f
    admin_password = (secrets / "admin.password").read_text().strip()
    broker_password = (secrets / "broker.password").read_text().strip()
    assert len(admin_password) >= 24 and admin_password != broker_password
    assert f"sasl.password={admin_password}" in (secrets / "admin.properties").read_text()
    calls = operator.calls.read_text().splitlines()
    sent = [c for c in calls if c.startswith("scp ") and "/secrets/" in c]
    assert len(sent) == 3
    for i, call in enumerate(sent, 1):
        assert f"broker-{i}/broker.pem" in call and f"kl-kl-test-rg-{i}." in call
        assert "ca.key" not in call
    # each VM's certificate names its private address and name, signed by the cluster's CA
    cert = subprocess.run(
        ["openssl", "x509", "-in", str(secrets / "broker-2/broker.pem"), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:10.42.1.12" in cert and "DNS:kl-2" in cert
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(secrets / "ca.pem"), str(secrets / "broker-2.crt")],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    for i in (1, 2, 3):
        text = (operator.build / f"cloud-init-kl-{i}.yaml").read_text()
        files, _ = parse_cloud_init(text)
        blob = text + "".join(b.decode() for b in files.values())
        assert admin_password not in blob and broker_password not in blob and "-----BEGIN PRIVATE KEY" not in blob
    # a second run keeps the CA and the passwords (the running cluster's)
    ca = (secrets / "ca.pem").read_bytes()
    assert operator.run("deploy.sh", "--initial", "--wheel", str(wheel)).returncode == 0
    assert (secrets / "ca.pem").read_bytes() == ca
    assert (secrets / "admin.password").read_text().strip() == admin_password


def test_provision_insecure_passes_it_to_install(operator: Operator) -> None:
    operator.commands("provision.sh", "--insecure")
    _, argv = parse_cloud_init((operator.build / "cloud-init-kl-1.yaml").read_text())
    assert "--insecure" in argv
    operator.write_config(SECURITY="PLAINTEXT")
    operator.commands("provision.sh")
    _, argv = parse_cloud_init((operator.build / "cloud-init-kl-1.yaml").read_text())
    assert "--insecure" in argv
    operator.write_config(SECURITY="TLS")
    cp = operator.run("provision.sh", "--dry-run")
    assert cp.returncode != 0 and "SECURITY must be SASL_SSL or PLAINTEXT" in cp.stderr


def test_status_and_teardown_dry_run(operator: Operator) -> None:
    assert operator.commands("status.sh") == [operator.ssh(1, "sudo bash /opt/kafkalite/node/status.sh")]
    assert operator.commands("status.sh", "--vm", "2") == [operator.ssh(2, "sudo bash /opt/kafkalite/node/status.sh")]
    assert operator.commands("teardown.sh") == [az("group", "delete", "--name", "kl-test-rg", "--yes")]


def test_teardown_asks_for_the_resource_group_name(operator: Operator) -> None:
    # Not a dry run: the az stub records what would have run.
    cp = operator.run("teardown.sh", stdin="yes\n")
    assert cp.returncode != 0 and "not confirmed" in cp.stderr
    assert "Type the resource group name" in cp.stderr
    assert not operator.calls.exists()
    cp = operator.run("teardown.sh", stdin="kl-test-rg\n")
    assert cp.returncode == 0, cp.stderr
    assert operator.calls.read_text() == "az group delete --name kl-test-rg --yes\n"


def test_config_errors_are_clear(operator: Operator) -> None:
    operator.write_config(ALLOWED_SSH_SOURCE="")
    cp = operator.run("provision.sh", "--dry-run")
    assert cp.returncode != 0 and "ALLOWED_SSH_SOURCE" in cp.stderr and not cp.stdout
    operator.write_config(COORDINATION="etcd")
    cp = operator.run("provision.sh", "--dry-run")
    assert cp.returncode != 0 and "COORDINATION must be custom or zookeeper" in cp.stderr and not cp.stdout
    operator.write_config(COORDINATION="zookeeper", ZOOKEEPER_COUNT="4")
    cp = operator.run("provision.sh", "--dry-run")
    assert cp.returncode != 0 and "ZOOKEEPER_COUNT must be a number from 1 to VM_COUNT (3)" in cp.stderr
    assert not cp.stdout
    operator.write_config()
    cp = operator.run("deploy.sh", "--dry-run", "--bogus")
    assert cp.returncode != 0 and "unknown argument: --bogus" in cp.stderr
    assert not operator.calls.exists()


# --- the node side: the checks the rolling restart waits on ----------------------------------------

DESCRIBE = """Topic: orders\tTopicId: abc\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: min.insync.replicas=2
\tTopic: orders\tPartition: 0\tLeader: {l0}\tReplicas: 1,2,3\tIsr: {i0}
\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: {i1}
Topic: solo\tTopicId: def\tPartitionCount: 1\tReplicationFactor: 1\tConfigs:
\tTopic: solo\tPartition: 0\tLeader: {l2}\tReplicas: 3\tIsr: 3
"""


def check(mode: str, broker: str, **parts: str) -> tuple[int, str]:
    """kl_check_partitions (deploy/node/common.sh) on a `kl-topics --describe` output."""
    text = DESCRIBE.format(**{"l0": "1", "i0": "1,2,3", "i1": "2,3,1", "l2": "3", **parts})
    script = f'source {shlex.quote(str(NODE / "common.sh"))}; kl_check_partitions "$1" "$2"'
    cp = subprocess.run(["bash", "-c", script, "_", mode, broker], input=text, capture_output=True, text=True)
    return cp.returncode, cp.stdout.strip()


def test_partition_checks() -> None:
    assert check("healthy", "") == (0, "3 partitions ok")
    assert check("healthy", "", i0="1,2") == (1, "orders-0 (Leader: 1, Replicas: 1,2,3, Isr: 1,2): under-replicated")
    assert check("healthy", "", i0="2,3,1") == (0, "3 partitions ok")  # the ISR is a set
    assert check("healthy", "", l2="none") == (1, "solo-0 (Leader: none, Replicas: 3, Isr: 3): no leader")
    # broker 1 restarted: it must be back in every ISR it belongs to
    assert check("in-sync", "1") == (0, "3 partitions ok")
    assert check("in-sync", "1", i0="2,3") == (
        1,
        "orders-0 (Leader: 1, Replicas: 1,2,3, Isr: 2,3): broker 1 not in the ISR yet",
    )
    assert check("in-sync", "3", l2="none") == (1, "solo-0 (Leader: none, Replicas: 3, Isr: 3): no leader")
    assert check("in-sync", "2", i0="1,3") == (
        1,
        "orders-0 (Leader: 1, Replicas: 1,2,3, Isr: 1,3): broker 2 not in the ISR yet",
    )
    # broker 1 stopped: fenced once it leads nothing and has left every ISR it shares with others
    assert check("fenced", "1")[1].endswith("broker 1 still leads")
    assert check("fenced", "1", l0="2", i0="2,3")[1].endswith(
        "orders-1 (Leader: 2, Replicas: 2,3,1, Isr: 2,3,1): broker 1 still in the ISR"
    )
    assert check("fenced", "1", l0="2", i0="2,3", i1="2,3") == (0, "3 partitions ok")
    # broker 3 stopped: the ISR of it alone stays (only it may lead cleanly again), its leader goes
    assert check("fenced", "3", i0="1,2", i1="2,1") == (
        1,
        "solo-0 (Leader: 3, Replicas: 3, Isr: 3): broker 3 still leads",
    )
    assert check("fenced", "3", i0="1,2", i1="2,1", l2="none") == (0, "3 partitions ok")
    # no topics at all: nothing to wait for
    script = f"source {shlex.quote(str(NODE / 'common.sh'))}; kl_check_partitions healthy ''"
    cp = subprocess.run(["bash", "-c", script], input="", capture_output=True, text=True)
    assert (cp.returncode, cp.stdout) == (0, "0 partitions ok\n")


def test_bootstrap_from_peers() -> None:
    cp = subprocess.run(
        ["bash", "-c", f"source {shlex.quote(str(NODE / 'common.sh'))}; kl_bootstrap {PEERS}"],
        capture_output=True,
        text=True,
    )
    assert cp.stdout == "10.42.1.11:9192,10.42.1.12:9192,10.42.1.13:9192\n"


ZK_SERVERS = "1=10.42.1.11,2=10.42.1.12,3=10.42.1.13"


def zk_functions(*settings: str, call: str) -> str:
    """A deploy/node/common.sh function of the ZooKeeper ensemble, with node.env-like settings."""
    script = f"source {shlex.quote(str(NODE / 'common.sh'))}; {'; '.join(settings)}; {call}"
    cp = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def test_zookeeper_ensemble_from_the_node_settings() -> None:
    base = ("KL_COORDINATION=zookeeper", f"KL_ZK_SERVERS={ZK_SERVERS}", "KL_ZK_ID=", "KL_ZK_CONNECT=")
    # the server whose address is the broker's runs here; a broker elsewhere runs none
    assert zk_functions(*base, "KL_HOST=10.42.1.12", call="kl_zk_server_id") == "2\n"
    assert zk_functions(*base, "KL_HOST=10.42.1.14", call="kl_zk_server_id") == ""
    assert zk_functions(*base, "KL_HOST=10.42.1.14", "KL_ZK_ID=3", call="kl_zk_server_id") == "3\n"
    assert zk_functions(*base, "KL_HOST=10.42.1.12", "KL_COORDINATION=custom", call="kl_zk_server_id") == ""
    # zookeeper.connect: every server's client port, or what --zookeeper-connect said
    assert zk_functions(*base, call="kl_zk_connect") == "10.42.1.11:2181,10.42.1.12:2181,10.42.1.13:2181\n"
    assert zk_functions(*base, "KL_ZK_CONNECT=zk:2181/kl", call="kl_zk_connect") == "zk:2181/kl\n"


def install_fails(root: Path, *args: str) -> str:
    """install.sh with these arguments: it must fail, before touching anything; its error."""
    cp = subprocess.run(
        ["bash", str(NODE / "install.sh"), "--root", str(root), *args], capture_output=True, text=True, timeout=30
    )
    assert cp.returncode != 0, cp.stderr
    assert list(root.iterdir()) == []  # it stopped before touching anything
    return cp.stderr.strip()


def test_install_checks_its_arguments_before_touching_anything(tmp_path: Path) -> None:
    assert "no entry for broker 4" in install_fails(tmp_path, "--id", "4", "--peers", PEERS)
    zk = ("--id", "1", "--peers", PEERS, "--coordination", "zookeeper")
    assert "needs --zookeeper-servers ID=HOST" in install_fails(tmp_path, *zk)
    for servers, error in (
        ("1=10.42.1.11,2:10.42.1.12", "'2:10.42.1.12' is not ID=HOST"),
        ("1=10.42.1.11,1=10.42.1.12", "server id 1 twice"),
        ("1=10.42.1.11,2=10.42.1.11", "host 10.42.1.11 twice"),
        ("0=10.42.1.11", "server ids are 1..255, got 0"),
    ):
        assert error in install_fails(tmp_path, *zk, "--zookeeper-servers", servers)
    error = install_fails(tmp_path, *zk, "--zookeeper-servers", ZK_SERVERS, "--zookeeper-id", "4")
    assert "--zookeeper-id 4: no server 4 in --zookeeper-servers" in error
    error = install_fails(tmp_path, *zk, "--zookeeper-connect", "zk1,zk2")
    assert "--zookeeper-connect must be HOST:PORT,...[/CHROOT], got 'zk1,zk2'" in error
    error = install_fails(tmp_path, "--id", "1", "--zookeeper-servers", ZK_SERVERS)
    assert "go with --coordination zookeeper" in error


def test_deploy_with_spark_workers_runs_spark_sh_after_the_brokers(operator: Operator) -> None:
    """SPARK_WORKERS=yes: after the rollout, each VM gets a Spark worker joined to VM 1's master."""
    operator.write_config(SPARK_WORKERS="yes", SPARK_MASTER_PORT="7177")
    got = operator.commands("deploy.sh", "--timeout", "120")
    remote = "/home/kladmin/kafkalite-deploy"
    spark = ["sudo", "bash", f"{remote}/spark.sh", "--master", "spark://10.42.1.11:7177"]
    expected_tail = [
        operator.ssh(1, [*spark, "--run-master"]),
        operator.ssh(2, spark),
        operator.ssh(3, spark),
        operator.ssh(1, ["sudo", "bash", f"{remote}/status.sh"]),
    ]
    assert got[-4:] == expected_tail
    assert any("spark.sh" in c for c in got[:-4] if c.startswith("scp")), "spark.sh is copied to the VMs"
    operator.write_config(SPARK_WORKERS="maybe")
    cp = operator.run("deploy.sh", "--dry-run")
    assert cp.returncode != 0 and "SPARK_WORKERS must be yes or no" in cp.stderr
