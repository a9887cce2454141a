"""broker/security/file_modes.py: which data dirs hold SCRAM material, and what a loose one gets."""

from __future__ import annotations

import os
import stat

import pytest

from broker.security.file_modes import METADATA_DIR, SCRAM_MARK, DataDirExposed, holds_scram, secure_log_dirs


def test_scram_material_is_found_in_bootstrap_records_or_the_metadata_log(tmp_path):
    assert not holds_scram(tmp_path)
    (tmp_path / "bootstrap.records").write_text("[]")
    assert not holds_scram(tmp_path)
    meta = tmp_path / METADATA_DIR
    meta.mkdir()
    # across the boundary of two 1 MiB reads
    (meta / "00000000000000000000.log").write_bytes(b"x" * ((1 << 20) - 5) + SCRAM_MARK + b"y")
    assert holds_scram(tmp_path)


def test_a_new_dir_is_the_owners_and_a_loose_one_without_credentials_is_tightened(tmp_path):
    new, loose = tmp_path / "new", tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o775)
    old = os.umask(0)
    try:
        assert secure_log_dirs([new, loose], group_readable=False) == [loose]
    finally:
        os.umask(old)
    assert stat.S_IMODE(new.stat().st_mode) == 0o700 and stat.S_IMODE(loose.stat().st_mode) == 0o700
    os.chmod(loose, 0o775)
    assert secure_log_dirs([loose], group_readable=True) == [loose]
    assert stat.S_IMODE(loose.stat().st_mode) == 0o750


def test_a_world_readable_dir_with_credentials_is_refused_and_left_alone(tmp_path):
    (tmp_path / "bootstrap.records").write_text('[{"type": "user_scram_credential"}]')
    os.chmod(tmp_path, 0o755)
    with pytest.raises(DataDirExposed, match=r"holds SCRAM credentials .* \(mode 0755\): run chmod 700"):
        secure_log_dirs([tmp_path], group_readable=False)
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
    os.chmod(tmp_path, 0o750)  # the group only: tightened, not refused
    assert secure_log_dirs([tmp_path], group_readable=False) == [tmp_path]
