"""The sbatch script campaign submits, as pure functions: array groups, parameters,
quoting of hostile names and paths, refusals, sbatch's environment and errors.

The scripts are checked against golden files in tests/golden/sbatch/ (pytest's
tmp folder masked as <TMP>, this interpreter as <PYTHON>; regenerate with
CAMPAIGN_UPDATE_GOLDEN=1 and review the diff).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from campaign.backends import sbatch as sb
from campaign.backends.resources import Resources
from campaign.common.errors import ConfigError
from job_specs import a_spec

GOLDEN = Path(__file__).parent / "golden" / "sbatch"
CID = "20261121-105700-3f2a"
CONTAINER_PY = "apptainer exec --nv --bind '/data/my data' '/images/my image.sif' python"


def resources(**over) -> Resources:
    r = {
        "nodes": 1, "tasks_per_node": 2, "gpus_per_node": 2, "cpus_per_task": 8, "timeout_min": 90,
        "partition": "a100_nvlink", "constraint": "a100_80g", "account": "proj42", "qos": "normal",
        "mem_gb": 128.0, "extra_sbatch": ["--exclusive", "--reservation=maint window"],
    }
    r.update(over)
    return Resources(**r)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("CAMPAIGN_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with CAMPAIGN_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


def masked(text: str, tmp: Path) -> str:
    """The machine-specific parts masked: pytest's tmp folder and this interpreter."""
    return text.replace(str(tmp), "<TMP>").replace(shlex.quote(sys.executable), "<PYTHON>")


def render(res: Resources, folder: Path, python=None, n: int = 3, name=None) -> str:
    return sb.render_sbatch(sb.sbatch_parameters(res, name or sb.job_name(CID, res)), folder, python, n)


def test_golden_array_for_a_representative_group(tmp_path):
    folder = tmp_path / "results with spaces" / "jobs" / CID
    text = render(resources(), folder, python=CONTAINER_PY, n=3)
    check_golden("nvlink_array.sh", masked(text, tmp_path))
    assert "#SBATCH --array=0-2%3" in text
    assert "#SBATCH --job-name=20261121-105700-3f2a-a100_nvlink-1x2-a100_80g" in text
    assert "#SBATCH --ntasks-per-node=2" in text and "#SBATCH --gpus-per-node=2" in text
    assert "#SBATCH --mem=128GB" in text and "#SBATCH --exclusive" in text
    assert f"{CONTAINER_PY} -u -m submitit.core._submit" in text  # the interpreter string as given


def test_golden_hostile_values_are_quoted(tmp_path):
    folder = tmp_path / "it's a 'results' dir #1 $(id)" / "jobs" / CID
    res = resources(partition="a'; echo foo", account="$(touch pwned)", qos="`id`", constraint="a100_80g&ib",
                    extra_sbatch=["--comment=a'; echo foo"], mem_gb=None)
    text = render(res, folder, n=1)
    check_golden("hostile.sh", masked(text, tmp_path))
    # The job name is sanitised; values are single-quoted as SLURM's #SBATCH parser reads them.
    assert "#SBATCH --job-name=20261121-105700-3f2a-a_echo_foo-1x2-a100_80g_ib\n" in text
    assert "#SBATCH --partition='a'\"'\"'; echo foo'" in text
    assert "#SBATCH --account='$(touch pwned)'" in text
    # Bash reads the srun line back into the exact folder.
    srun = next(ln for ln in text.splitlines() if ln.startswith("srun "))
    argv = shlex.split(srun)
    assert argv[argv.index("--output") + 1] == f"{folder}/%A_%a_%t_log.out"
    assert argv[-1] == str(folder)


@pytest.mark.parametrize("name", ["a'; echo foo", "a\nb", "x" * 300, "", "..", "v100 gpus=2 $(id)"])
def test_job_names_are_sanitised(name):
    out = sb.safe_name(name)
    assert re.fullmatch(r"[A-Za-z0-9._+-]+", out) and len(out) <= sb.MAX_JOB_NAME


@pytest.mark.parametrize("field", ["partition", "account", "qos", "constraint"])
def test_newline_in_a_value_is_refused(field, tmp_path):
    with pytest.raises(ConfigError, match=rf"platform\.{field} .* contains a newline"):
        sb.sbatch_parameters(resources(**{field: "v100\n#SBATCH --partition=other"}), "name")


@pytest.mark.parametrize("folder,why", [("/res/a\nb", "newline"), ("/res/%j", "file-name pattern"),
                                        ("/res/a\\b", "backslash")])
def test_unusable_folder_is_refused(folder, why):
    with pytest.raises(ConfigError, match=why):
        sb.render_sbatch(sb.sbatch_parameters(resources(), "n"), Path(folder), None, 1)


@pytest.mark.parametrize(
    "extra,expect",
    [
        (["--exclusive"], {"exclusive": True}),
        (["--reservation=maint", "--gres-flags=enforce-binding"], {"reservation": "maint", "gres-flags": "enforce-binding"}),
        (["--mail_type=END"], {"mail-type": "END"}),
    ],
)
def test_extra_sbatch_parsed(extra, expect):
    assert sb.parse_extra_sbatch(extra) == expect


@pytest.mark.parametrize(
    "extra,message",
    [
        (["-x node1"], "is not of the form --option"),
        (["--output=/tmp/x"], "may not set --output; campaign sets it itself"),
        (["--array=0-3"], "may not set --array"),
        (["--partition=x"], "may not set --partition; set platform.partition instead"),
        (["--time=10"], "set platform.time_limit_min instead"),
        (["--comment=a\nb"], "contains a newline"),
    ],
)
def test_extra_sbatch_refused(extra, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        sb.parse_extra_sbatch(extra)


def test_parameters_leave_out_what_is_unset():
    p = sb.sbatch_parameters(resources(constraint=None, account=None, qos=None, mem_gb=None, extra_sbatch=[],
                                       gpus_per_node=0), "n")
    assert p == {"job_name": "n", "partition": "a100_nvlink", "time": 90, "nodes": 1, "ntasks_per_node": 2,
                 "cpus_per_task": 8, "srun_args": ["--kill-on-bad-exit=1"], "signal_delay_s": 90}
    assert sb.sbatch_parameters(resources(mem_gb=1.5), "n")["mem"] == "1536MB"


def test_the_time_limit_warning_never_comes_while_the_ranks_start():
    """sbatch(1): the --signal warning "may be sent up to 60 seconds earlier than
    specified"; submitit's 90 s lead on a 2-minute limit meant USR2 at the first check,
    while the ranks imported: they died by signal 12 and the point's reason was lost."""
    assert [sb.signal_delay_s(m) for m in (1, 2, 3, 4, 60)] == [0, 30, 90, 90, 90]
    for minutes in range(2, 10):  # the warning's earliest moment is never in the first 30 s
        assert minutes * 60 - sb.signal_delay_s(minutes) - sb.SLURM_SIGNAL_SLACK_S >= sb.STARTUP_S
    script = sb.render_sbatch(sb.sbatch_parameters(resources(timeout_min=2), "n"), "/r/jobs/x", sb.rank_python(None), 1)
    assert "#SBATCH --signal=USR2@30\n" in script


def test_a_rank_starts_with_the_warning_ignored_until_its_own_handler(tmp_path):
    """The srun command execs the job's python with USR2 ignored (inherited across exec):
    a warning that arrives while it imports is not its death."""
    probe = "import signal; print(signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN)"
    cmd = f"{sb.rank_python(shlex.quote(sys.executable))} -c {shlex.quote(probe)}"
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
    assert sb.rank_python("apptainer exec --nv /i.sif python").endswith(" campaign-rank apptainer exec --nv /i.sif python")


def test_a_failing_rank_ends_a_many_task_step_at_once():
    assert sb.sbatch_parameters(resources(nodes=2, tasks_per_node=1), "n")["srun_args"] == ["--kill-on-bad-exit=1"]
    assert "srun_args" not in sb.sbatch_parameters(resources(tasks_per_node=1, gpus_per_node=1), "n")  # one task


def _item(pid, **over):
    return (SimpleNamespace(resources=resources(**over)), a_spec(pid, campaign_id=CID))


def test_points_with_equal_resources_share_one_group_in_order():
    items = [_item(1), _item(2, partition="v100"), _item(3), _item(4, extra_sbatch=["--exclusive"]),
             _item(5, tasks_per_node=1, gpus_per_node=1), _item(6, partition="v100")]
    groups = sb.group_items(items)
    assert [[spec.point_id for _, spec in g] for g in groups] == [[1, 3], [2, 6], [4], [5]]


def test_groups_split_at_max_array_size():
    assert [list(c) for c in sb.chunks(list(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert sb.job_name(CID, resources(), part=1).endswith("-part2")


def test_scrubbed_environment_keeps_only_the_client_config():
    env = {"PATH": "/bin", "SBATCH_PARTITION": "debug", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "4",
           "SLURM_CONF": "/etc/slurm/slurm.conf", "MY_SLURM_X": "1"}
    assert sb.scrubbed_environ(env) == {"PATH": "/bin", "SLURM_CONF": "/etc/slurm/slurm.conf", "MY_SLURM_X": "1"}


@pytest.mark.parametrize(
    "stderr,transient",
    [
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", True),
        ("sbatch: error: Batch job submission failed: Resource temporarily unavailable", True),
        ("slurm_load_jobs error: Unable to contact slurm controller (connect failure)", True),
        ("sbatch: error: invalid partition specified: nosuch\nsbatch: error: Batch job submission failed: "
         "Invalid partition name specified", False),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not available", False),
        ("sbatch: error: Batch job submission failed: Invalid feature specification", False),
    ],
)
def test_transient_sbatch_errors(stderr, transient):
    assert sb.is_transient(sb.sbatch_message(stderr)) is transient


def test_sbatch_message_is_slurms_own_on_one_line():
    err = ("sbatch: error: invalid partition specified: nosuch\n"
           "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert sb.sbatch_message(err) == ("invalid partition specified: nosuch; "
                                      "Batch job submission failed: Invalid partition name specified")
    assert sb.sbatch_message("", 1) == "sbatch exited with status 1"


@pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SlurmExecutor needs srun on PATH")
def test_render_is_what_submitits_executor_writes(tmp_path):
    from campaign.backends.slurm import CampaignSlurmExecutor

    folder = tmp_path / "a b"
    params = sb.sbatch_parameters(resources(), "n")
    ex = CampaignSlurmExecutor(folder, python=CONTAINER_PY)
    ex.update_parameters(**params)
    ex.parameters["map_count"] = 4
    assert ex._make_submission_file_text(ex._submitit_command_str, "uid") == sb.render_sbatch(params, folder, CONTAINER_PY, 4)
