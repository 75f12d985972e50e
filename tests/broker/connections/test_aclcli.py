"""`fetchwork acl user NAME` and `fetchwork acl public-key`, beside the role rules."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from fetchwork.broker.trust.signer import ensure_key_pair
from fetchwork.cli import main


def acl(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["acl", *args], env=env)


def test_a_person_line_and_its_removal(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("secret\n")
    line = acl("user", "alice", "--pool", "p", "--password-file", str(tmp_path / "pw"))
    assert line.exit_code == 0, line.output
    assert line.output.startswith("user fw-p-u-alice reset on #")
    assert "secret" not in line.output
    command = acl("user", "alice", "--pool", "p", "--commands")
    assert command.output.startswith("ACL SETUSER fw-p-u-alice ")
    assert acl("user", "alice", "--pool", "p", "--remove", "--commands").output.strip() == \
        "ACL DELUSER fw-p-u-alice"
    assert "delete the line 'user fw-p-u-alice" in acl("user", "alice", "--pool", "p",
                                                        "--remove").output


def test_bad_person_requests_are_usage_errors() -> None:
    for args, why in ((("user",), "give one person"), (("user", "a", "b"), "give one person"),
                      (("user", "x y"), "person name"), (("user", "al", "--user", "u"),
                                                           "drop --user"),
                      (("submitter", "--remove"), "--remove applies"),
                      (("bogus",), "'bogus' is not one of")):
        result = acl(*args, "--pool", "p")
        assert result.exit_code == 2 and why in result.output, (args, result.output)


def test_the_roles_print_as_before() -> None:
    result = acl("--pool", "p")
    assert result.exit_code == 0
    assert [line.split()[1] for line in result.output.splitlines()] == \
        ["fw-p-submitter", "fw-p-execute", "fw-p-admin"]


def test_public_key_prints_the_pem_of_the_brokers_key(tmp_path: Path) -> None:
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    shown = acl("public-key", env={"_FETCHWORK_JOB_SIGNING_KEY": str(tmp_path / "k.pem")})
    assert shown.exit_code == 0, shown.output
    assert shown.output == (tmp_path / "p.pem").read_text()
    missing = acl("public-key", env={"_FETCHWORK_JOB_SIGNING_KEY": ""})
    assert missing.exit_code != 0 and "JOB_SIGNING_KEY is not set here" in missing.output
