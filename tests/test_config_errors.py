"""A configuration error is one line, the offending key first with the closest valid key; an
option that clashes with a checkpoint says where it was set."""

from __future__ import annotations

import pytest

from dna_video.training.cli import console_main, main
from dna_video.training.parser import explain_config_error, option_sources
from dna_video.training.runs import RestoreError, compare_hparams

QUICKSTART = "configs/quickstart.yaml"


def _error_lines(capsys, args, yaml_text=None, tmp_path=None):
    if yaml_text is not None:
        extra = tmp_path / "mine.yaml"
        extra.write_text(yaml_text)
        args = [*args, "--config", str(extra)]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, *args])
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("yaml_text, line", [
    ("trainer:\n  max_epoch: 3\n", "error: trainer.max_epoch is not an option; did you mean trainer.max_epochs?"),
    ("data:\n  class_path: dna_video.data.synthetic.SyntheticSmarthome\n  init_args:\n    batch_sise: 3\n",
     "error: data.init_args.batch_sise is not an option of SyntheticSmarthome; did you mean data.init_args.batch_size?"),
    ("data:\n  init_args:\n    num_frame: 3\n",  # an option of the base class, reached through **kwargs
     "error: data.init_args.num_frame is not an option of SyntheticSmarthome; did you mean data.init_args.num_frames?"),
    ("model:\n  network:\n    deph: 3\n",
     "error: model.network.deph is not an option of VideoClassifier's network; did you mean model.network.depth?"),
    ("model:\n  label_smothing: 0.1\n",
     "error: model.label_smothing is not an option of VideoClassifier; did you mean model.label_smoothing?"),
    ("model:\n  colour: red\n", "error: model.colour is not an option of VideoClassifier"),
])
def test_a_mistyped_yaml_key_is_one_line_with_the_closest_key(yaml_text, line, capsys, tmp_path):
    lines = _error_lines(capsys, [], yaml_text, tmp_path)
    assert len(lines) == 2 and lines[0] == line
    assert lines[1].endswith(" fit --help lists the options)")  # the program's name as it was run


def test_a_value_of_the_wrong_type_names_the_key_and_the_type(capsys):
    lines = _error_lines(capsys, ["--trainer.max_epochs=abc"])
    assert lines[0] == "error: trainer.max_epochs: expected int (given abc)" and len(lines) == 2


def test_an_error_raised_while_building_the_model_is_its_reason_alone(capsys):
    with pytest.raises(SystemExit):
        console_main(["fit", "--config", QUICKSTART, "--model.network.attention=dnna", "--trainer.logger=false"])
    err = capsys.readouterr().err
    assert "error: ValueError: model.network.attention: unknown attention 'dnna'; choose one of [" in err
    assert "Union" not in err and "Namespace(" not in err


@pytest.mark.parametrize("key", ["attention", "temporal_attention", "spatial_attention"])
def test_an_unknown_attention_kind_names_its_key_and_the_import_option(key, capsys):
    """(review finding 10) The key as the config states it, the kinds, and how a kind of the
    user's own module becomes known (``--import MODULE``); one line."""
    with pytest.raises(SystemExit):
        console_main(["fit", "--config", QUICKSTART, f"--model.network.{key}=mine", "--trainer.logger=false"])
    line = capsys.readouterr().err.splitlines()[0]
    assert line.startswith(f"error: ValueError: model.network.{key}: unknown attention 'mine'; choose one of ['")
    assert "'dna'" in line and "--import MODULE" in line and 'docs/variants.md, "Your own attention kind"' in line


def test_explain_keeps_messages_it_does_not_know():
    assert explain_config_error("something else entirely") == "something else entirely"


def test_option_sources_follow_the_order_jsonargparse_applies(tmp_path):
    first = tmp_path / "a.yaml"
    first.write_text("model:\n  network:\n    attention: dna\n    depth: 2\ndata:\n  class_path: x.Y\n"
                     "  init_args:\n    num_frames: 8\n")
    sources = option_sources(["--config", str(first), "--model.network.depth=3", "--data.init_args.root", "r"])
    assert sources == {
        "model.network": str(first), "model.network.attention": str(first), "model.network.depth": "the command line",
        "data.num_frames": str(first), "data.root": "the command line",
    }


def test_a_clash_with_a_checkpoint_names_where_the_option_was_set():
    saved = {"num_frames": 4, "network": {"attention": "softmax", "depth": 1}}
    given = {"num_frames": 8, "network": {"attention": "dna", "depth": 1}}
    inputs = {"num_frames": "num_frames"}
    with pytest.raises(RestoreError) as error:
        compare_hparams(given, saved, "x.ckpt", {"model.network.attention": "configs/mine.yaml"}, inputs)
    text = str(error.value)
    assert "model.network.attention: given 'dna' (set in configs/mine.yaml), the checkpoint has 'softmax'" in text
    assert "model.num_frames: given 8 (from data.init_args.num_frames, its default), the checkpoint has 4" in text
    # Options the command never set are defaults: the checkpoint's values replace them silently.
    assert compare_hparams({"network": {"attention": "dna"}}, {"network": {"attention": "softmax"}}, "x.ckpt", {}) == []


def test_a_model_option_the_data_fixes_stated_otherwise_is_refused_naming_both(capsys, tmp_path, monkeypatch):
    """``model.num_frames`` / ``model.img_size`` come from the data (frames, crop): stated with
    another value they would be overridden without a word; the command stops before building
    anything, naming where each was set."""
    from dna_video.training.cli import DnACLI

    monkeypatch.setattr(DnACLI, "instantiate_classes", lambda self: pytest.fail("built despite the clash"))
    mine = tmp_path / "mine.yaml"
    mine.write_text("model:\n  img_size: 32\n")
    with pytest.raises(SystemExit) as stop:
        console_main(["fit", "--config", QUICKSTART, "--config", str(mine), "--model.num_frames=16",
                      "--data.init_args.num_frames=4", "--trainer.logger=false"])
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == ("error: ValueError: model.num_frames is 16 on the command line, but the data fixes it: "
                      "data.init_args.num_frames is 4 (set on the command line); model.img_size is 32 in "
                      f"{mine}, but the data fixes it: data.init_args.crop_size is 64 (set in {QUICKSTART}). "
                      "Set the data's option and drop the model's (docs/configs.md, \"What the data fixes\")")


def test_a_class_count_stated_otherwise_than_the_built_datas_is_refused(capsys, tmp_path, monkeypatch):
    """(review finding 5) ``model.num_classes`` is the built DataModule's (its class list): stated
    with another value it was replaced without a word; the command stops before it writes
    anything, in one line naming the key, where it was set and the data's count. The data's own
    count is accepted."""
    from dna_video.data.synthetic import SyntheticSmarthome
    from dna_video.training.cli import DnACLI

    monkeypatch.setattr(DnACLI, "_run_subcommand", lambda self, subcommand: pytest.fail("ran despite the clash"))
    classes = SyntheticSmarthome(root=str(tmp_path)).num_classes
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"model:\n  num_classes: {classes + 2}\n")
    common = ["fit", "--config", QUICKSTART, f"--data.init_args.root={tmp_path}", "--trainer.logger=false"]
    for given, where in ((["--config", str(mine)], f"in {mine}"), ([f"--model.num_classes={classes + 2}"],
                                                                 "on the command line")):
        with pytest.raises(SystemExit) as stop:
            console_main([*common, *given])
        assert stop.value.code == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0] == (f"error: ValueError: model.num_classes is {classes + 2} {where}, but the data fixes it: "
                          f"SyntheticSmarthome.num_classes is {classes}. Drop the model's option (docs/configs.md, "
                          "\"What the data fixes\")")
    monkeypatch.setattr(DnACLI, "_run_subcommand", lambda self, subcommand: None)
    assert main([*common, f"--model.num_classes={classes}"]).model.net.num_classes == classes


def test_the_same_value_as_the_datas_is_accepted(monkeypatch, tmp_path):
    """A 0.2 run's config.yaml states the linked options with the data's values: it still runs."""
    from dna_video.training.cli import DnACLI

    monkeypatch.setattr(DnACLI, "_run_subcommand", lambda self, subcommand: None)
    cli = main(["fit", "--config", QUICKSTART, "--model.num_frames=8", "--model.img_size=64",
                f"--data.init_args.root={tmp_path}", "--trainer.logger=false"])
    assert (cli.model.net.num_frames, cli.model.net.img_size) == (8, 64)


@pytest.mark.parametrize("text, where, problem", [
    ("model:\n  network:\n    arch: tiny\n   depth: 2\n", "4:4", "expected <block end>, but found '<block mapping start>'"),
    ("model: {network: [1, 2}\n", "1:23", "expected ',' or ']', but got '}'"),
    ("model:\n\tnetwork: 1\n", "2:1", "found character '\\t' that cannot start any token"),
])
def test_a_config_that_is_not_yaml_is_one_line_with_its_line_and_column(text, where, problem, tmp_path, monkeypatch):
    """(issue 39.5) Instead of the parser's 62-line traceback: the file, line and column, and a
    non-zero exit (SystemExit with a message: status 1); also for a config given by its shipped name."""
    from dna_video.training import configs

    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    expected = f"error: {bad}:{where}: not valid YAML: {problem}"
    for args in (["--config", QUICKSTART, "--config", str(bad)], [f"--config={bad}"], ["-c", str(bad)]):
        with pytest.raises(SystemExit) as stop:
            console_main(["fit", *args])
        assert stop.value.code == expected
    monkeypatch.setattr(configs, "packaged_configs", lambda: {"broken": bad})
    with pytest.raises(SystemExit) as stop:
        console_main(["fit", "--config", "broken"])
    assert stop.value.code == expected
    # (review finding 15) A nested config: a file given to a key, .yaml or .yml.
    nested = tmp_path / "nested.yml"
    nested.write_text(text)
    for args in (["--data", str(bad)], [f"--model={bad}"], ["--trainer", str(nested)],
                 ["--model.network", str(nested)]):
        with pytest.raises(SystemExit) as stop:
            console_main(["fit", "--config", QUICKSTART, *args])
        assert stop.value.code == f"error: {args[-1].partition('=')[2] or args[-1]}:{where}: not valid YAML: {problem}"


def test_a_datamodule_that_fixes_only_the_class_count_leaves_frames_and_size_to_the_model(tmp_path, monkeypatch):
    """(review of issue 36) Every DATA_FIXED name is linked; where the data fixes none, the model
    keeps its own value (its default, or the one stated), not None."""
    import lightning
    import sys
    import types

    module = types.ModuleType("only_classes_dm")

    class OnlyClassesDM(lightning.LightningDataModule):
        def __init__(self, classes: int = 3):
            super().__init__()
            self.num_classes = classes

    module.OnlyClassesDM = OnlyClassesDM
    monkeypatch.setitem(sys.modules, "only_classes_dm", module)
    common = ["--data", "only_classes_dm.OnlyClassesDM", "--data.classes=4", "--model.network.arch=tiny",
              "--trainer.logger=false"]
    built = main(common, run=False).model
    assert (built.hparams.num_classes, built.hparams.num_frames, built.hparams.img_size) == (4, 8, 224)
    assert tuple(built.net.time_embed.shape)[1] == 8
    stated = main([*common, "--model.num_frames=4", "--model.img_size=32"], run=False).model
    assert (stated.hparams.num_frames, stated.hparams.img_size) == (4, 32)
    assert tuple(stated.net.time_embed.shape)[1] == 4


def test_a_clash_with_the_data_is_refused_from_python_without_a_subcommand(tmp_path):
    """(review of issue 36) ``main(..., run=False)``, the notebooks' way, parses no subcommand:
    the clash is refused there too, not replaced by the data's value."""
    with pytest.raises(ValueError, match="model.num_frames is 16 on the command line, but the data fixes it"):
        main(["--config", QUICKSTART, f"--data.init_args.root={tmp_path}", "--model.num_frames=16",
              "--trainer.logger=false"], run=False)
