"""The option schema (nkmpi.options) is the one source of the CLI flags, the estimator's
parameters, the docs' table, the resume keys and the result attributes."""

import inspect
from dataclasses import fields

import numpy as np
import pytest
from sklearn.base import clone

from nkmpi import NKMeans
from nkmpi.app import check_resumable
from nkmpi.cli import make_parser
from nkmpi.errors import InputError
from nkmpi.options import Options, estimator_fields, option_table, resume_keys


def flags(command):
    parser = make_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {a.dest: a for a in sub._actions}


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_each_option_is_a_flag_of_the_commands_that_take_it(command):
    actions = flags(command)
    for spec in fields(Options):
        assert (spec.name in actions) == (command in spec.metadata["commands"]), spec.name


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_a_minimal_command_line_gives_the_schema_defaults(command):
    args = make_parser().parse_args([command, "data.h5", "-k", "3"])
    parsed = Options.from_args(args)
    expected = Options(n_clusters=3)
    for spec in fields(Options):
        if command in spec.metadata["commands"]:
            assert getattr(parsed, spec.name) == getattr(expected, spec.name), spec.name


def test_every_flag_reaches_its_option():
    argv = ["run", "d.h5", "-k", "4", "--coupling", "2", "--alpha", "0.25", "--iters", "7", "--tol", "0.5",
            "--init", "flood", "--n-init", "3", "--seed", "9", "--monitor-every", "2",
            "--link-failure-prob", "0.1", "--dropout-prob", "0.2", "--inner", "2", "--rho-schedule", "1:4",
            "--graph", "complete", "--threads", "2", "--checkpoint-every", "3", "--checkpoint", "c.h5",
            "--resume", "r.h5", "--out", "o.h5", "--quiet"]
    options = Options.from_args(make_parser().parse_args(argv))
    assert options == Options(n_clusters=4, coupling=2.0, alpha=0.25, max_iter=7, tol=0.5, init="flood",
                              n_init=3, seed=9, monitor_every=2, link_failure_prob=0.1, dropout_prob=0.2,
                              inner=2, rho_schedule=(1.0, 4.0, 1e-3), graph="complete", threads=2,
                              checkpoint_every=3, checkpoint="c.h5", resume="r.h5", out="o.h5", quiet=True)
    with pytest.raises(InputError, match="not allowed with"):
        make_parser().parse_args(["run", "d.h5", "-k", "2", "--rho", "1", "--coupling", "1"])


def test_the_estimator_takes_every_option_with_an_estimator_name():
    signature = inspect.signature(NKMeans)
    specs = estimator_fields()
    assert list(signature.parameters) == list(specs) + ["comm"]
    for name, spec in specs.items():
        assert signature.parameters[name].default == spec.default or spec.default is None, name
    assert {"random_state", "n_threads", "link_failure_prob", "dropout_prob", "checkpoint", "resume",
            "graph"} <= set(specs)
    model = NKMeans(5, rho=2.0, dropout_prob=0.1, random_state=3)
    copy = clone(model)
    assert copy.get_params() == model.get_params() and copy is not model
    assert copy.set_params(alpha=0.3).alpha == 0.3
    with pytest.raises(ValueError, match="invalid parameter"):
        model.set_params(seed=1)
    with pytest.raises(TypeError):
        NKMeans(seed=1)
    assert "dropout_prob" in NKMeans.__doc__ and "{parameters}" not in NKMeans.__doc__


def test_result_attributes_hold_every_stored_option():
    options = Options(n_clusters=3, rho_schedule=(1, 10), init=np.zeros((3, 2)))
    attrs = options.as_attrs("ring")
    stored = {spec.name for spec in fields(Options) if spec.metadata["role"] != "io"}
    assert set(attrs) == stored
    assert attrs["init"] == "array" and attrs["rho_schedule"] == "1.0:10.0:0.001" and attrs["graph"] == "ring"
    assert set(resume_keys()) <= stored
    assert "max_iter" not in resume_keys() and "threads" not in resume_keys()


@pytest.mark.parametrize("key", resume_keys())
def test_a_checkpoint_made_with_another_value_of_any_resume_key_is_refused(key):
    options = Options(n_clusters=2, rho=1.0).resolve(10, 2)
    attrs = dict(options.as_attrs("ring"), n_agents=2, n_points=10, n_features=3, weighted=False)
    saved = dict(attrs, iteration=5, rho_stage=0)
    checkpoint = {"attrs": saved, "centers": np.zeros((1, 2, 3))}
    check_resumable("c.h5", checkpoint, options, attrs)
    saved[key] = "something else"
    with pytest.raises(InputError, match=f"{key} 'something else'"):
        check_resumable("c.h5", checkpoint, options, attrs)


def test_the_option_table_has_a_row_per_option():
    rows = option_table().splitlines()[2:]
    assert len(rows) == len(fields(Options))
    assert all(row.count("|") >= 5 for row in rows)
    assert any(row.startswith("| `-k` / `--clusters`") for row in rows)


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_help_lists_every_flag_of_the_command(command, capsys):
    with pytest.raises(SystemExit) as stop:
        make_parser().parse_args([command, "--help"])
    assert stop.value.code == 0
    shown = capsys.readouterr().out
    for spec in fields(Options):
        if command in spec.metadata["commands"]:
            flag = (spec.metadata["flag"] or "--" + spec.name.replace("_", "-")).split("/")[-1]
            assert flag in shown, flag
