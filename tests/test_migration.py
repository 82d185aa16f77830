"""0.1 -> 0.2: what 0.1 wrote still works, and 0.1's names still lead somewhere.

* The fixtures written by 0.1.0 (``tests/fixtures/v0_1``: a checkpoint of each task, their run
  folders with 0.1's ``config.yaml``, the example configs) test, predict and resume.
* Every 0.1 module path imports (the same module object as its new home) with a
  DeprecationWarning naming the new path; ``python -m`` of an old command runs the new one.
* The names ``dna_video`` exported in 0.1 are still there, and ``import dna_video`` imports no torch.
"""

import importlib
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "v0_1"

# What `dna_video/__init__.py` exported in 0.1.0.
PUBLIC_0_1 = ["ATTENTIONS", "Attention", "DenoisingAttention", "PRESETS", "SoftmaxAttention", "TimeSformer",
              "build_attention", "timesformer"]


@pytest.fixture
def runs(tmp_path):
    """A copy of the 0.1 run folders (the commands below write into them)."""
    copy = tmp_path / "runs"
    shutil.copytree(FIXTURES / "runs", copy)
    # The registry names the runs where 0.1 wrote them: here, the copy (as for a user's own folder).
    registry = copy / "runs.jsonl"
    records = [json.loads(line) for line in registry.read_text().splitlines()]
    for record in records:
        for key in ("log_dir", "checkpoint_dir"):
            record[key] = str(copy / record[key].split("/v0_1/runs/", 1)[1])
    registry.write_text("".join(json.dumps(r) + "\n" for r in records))
    return copy


def _config(run: Path, tmp_path: Path, **data) -> Path:
    """The run's 0.1 config.yaml with the data root and the log folder of this test."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["data"]["init_args"].update(data)
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(run.parents[1])
    path = tmp_path / f"{run.parent.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_a_0_1_video_run_tests_predicts_and_resumes(runs, tmp_path, synthetic_root):
    from dna_video.tools.predict import main as predict
    from dna_video.training.cli import main

    run = runs / "video" / "version_0"
    config = _config(run, tmp_path, root=str(synthetic_root))
    last = run / "checkpoints" / "last.ckpt"
    cli = main(["test", "--config", str(config), f"--ckpt_path={last}", "--trainer.enable_progress_bar=false"])
    assert 0.0 <= cli.trainer.callback_metrics["test/top1"] <= 1.0
    # The same weights as 0.1 wrote them.
    state = torch.load(last, weights_only=True)["state_dict"]
    for key, value in cli.model.state_dict().items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0)

    video = sorted(Path(synthetic_root).rglob("*.mp4"))[0]
    out = tmp_path / "predictions.csv"
    assert predict([str(last), str(video), "--out", str(out), "--crops", "1"]) == 0
    rows = out.read_text().splitlines()
    assert len(rows) == 2 and video.name in rows[1]

    # Resume the finished 2-epoch run for a third epoch, in its own folder.
    cli = main(["fit", "--config", str(config), "--ckpt_path=last", "--trainer.max_epochs=3",
                "--test_after_fit=false", "--trainer.enable_progress_bar=false"])
    assert cli.trainer.current_epoch == 3
    assert torch.load(last, weights_only=True)["epoch"] == 2
    assert json.loads((run / "summary.json").read_text())["fit"]["epochs"] == 3


@pytest.mark.slow
def test_a_0_1_probe_run_tests_through_the_old_command(runs, tmp_path, synthetic_root):
    run = runs / "probe" / "version_0"
    config = _config(run, tmp_path, root=str(synthetic_root))
    probe_config = yaml.safe_load(config.read_text())
    # Its backbone was read from the video run at fit time; the checkpoint holds it (no re-import).
    probe_config["model"]["init_from"] = None
    config.write_text(yaml.safe_dump(probe_config))
    with pytest.warns(DeprecationWarning, match="dna_video.probe_module moved"):
        module = importlib.import_module("dna_video.probe_module")
    from dna_video.training.legacy import probe_main as main

    cli = main(["test", "--config", str(config), f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
                "--trainer.enable_progress_bar=false"])
    assert isinstance(cli.model, module.ProbeClassifierModule)
    assert 0.0 <= cli.trainer.callback_metrics["test/top1"] <= 1.0


def test_a_0_1_image_checkpoint_tests_through_the_old_command(runs, tmp_path):
    from dna_video.training.legacy import image_main as main

    run = runs / "image" / "version_0"
    config = _config(run, tmp_path, root=str(tmp_path / "images"))
    cli = main(["test", "--config", str(config), f"--ckpt_path={run / 'checkpoints' / 'best-00.ckpt'}",
                "--trainer.enable_progress_bar=false"])
    assert cli.trainer.callback_metrics["test/top1"] >= 0.0
    state = torch.load(run / "checkpoints" / "best-00.ckpt", weights_only=True)["state_dict"]
    torch.testing.assert_close(cli.model.state_dict()["net.blocks.1.attn.neg_scalers"],
                               state["net.blocks.1.attn.neg_scalers"], rtol=0, atol=0)


def test_every_0_1_module_path_imports_its_new_module_with_a_warning():
    import dna_video

    for old, (new, _, warns) in dna_video.MOVED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        if warns:
            assert any(f"{old} moved to {new}" in m for m in messages), (old, messages)
        else:
            assert not any(old in m for m in messages), (old, messages)
    # A module below a moved package is the new module itself (one class object, not two).
    from dna_video.callbacks.guard import NonFiniteGuard
    from dna_video.training.callbacks.guard import NonFiniteGuard as new

    assert NonFiniteGuard is new


# What each 0.2 prediction module that moved in 0.3 exported (its __all__ in 0.2.0); checked with
# the other 0.2 paths (NAMES_0_2, below).
PREDICTION_0_2 = {
    "dna_video.analysis.inference": ["EvalSettings", "LoadedModel", "load_model", "VideoTooSmallError", "VideoViews",
                                     "load_views", "read_views", "view_logits", "device_of"],
    "dna_video.analysis.window_network": ["WindowNetwork"],
    "dna_video.analysis.predictions": ["PREDICTION_COLUMNS", "top_classes", "prediction_records", "csv_rows",
                                       "write_csv", "prediction_table"],
    "dna_video.analysis.windows": ["Stride", "parse_stride", "Windows", "plan_windows", "TimelineStats", "window_clips",
                                   "Timeline", "sliding_timeline", "smooth", "Segment", "segments_of", "windows_csv",
                                   "srt_timestamp", "srt_text", "TimelineFiles", "write_timeline", "describe"],
    "dna_video.analysis.timeline": ["Stride", "parse_stride", "Windows", "plan_windows", "window_clips", "TimelineStats",
                                    "Timeline", "video_timeline", "smooth", "Segment", "segments_of", "windows_csv",
                                    "srt_timestamp", "srt_text", "TimelineFiles", "write_timeline", "describe"],
    "dna_video.analysis.stream": ["StreamSourceError", "is_local_file", "display_name", "stream_stem", "open_source",
                                  "source_rate", "LivePlan", "FrameReader", "LiveWindow", "LiveStats", "run_stream",
                                  "LiveCsv", "latency_summary"],
    "dna_video.analysis.annotate": ["BAND_COLOUR", "TEXT_COLOUR", "BAR_COLOUR", "TRACK_COLOUR", "BRANCH_COLOURS",
                                    "FrameLabel", "bar_rows", "band_height", "draw_label", "crop_region",
                                    "blend_attention", "annotate_frame", "encode_video", "annotate_timeline",
                                    "LiveAnnotator"],
    "dna_video.runtime": [],
    "dna_video.runtime.model": ["OnnxModel", "OnnxModelError", "load_onnx_model", "session_options", "providers_for",
                                "mean_view_probs", "softmax"],
    "dna_video.runtime.inference": ["VideoViews", "load_views", "Predictions", "predict_videos", "OnnxWindows",
                                    "video_timeline"],
    "dna_video.runtime.preprocess": ["resized_size", "resize_short_side", "crop_boxes", "frame_views", "clip_views"],
    "dna_video.tools.predict_cli": ["VIDEO_SUFFIXES", "LIST_SUFFIXES", "collect_videos", "add_settings_arguments",
                                    "settings_overrides", "parser", "check_arguments", "write_predictions",
                                    "failure_summary", "write_timelines", "input_options", "run_live"],
    "dna_video.tools.predict_onnx": ["main"],
}
# What 0.2 users imported from dna_video.tools.predict, which stayed.
PREDICT_COMMAND_0_2 = ["VIDEO_SUFFIXES", "LIST_SUFFIXES", "collect_videos", "Predictions", "predict_videos",
                       "prediction_records", "write_features", "add_settings_arguments", "settings_overrides", "main"]


def test_the_0_2_prediction_paths_left_no_file_and_their_classes_are_the_new_ones():
    """Prediction in one room: each 0.2 path (warning and names: the NAMES_0_2 test below) is no
    file or folder any more, its classes are the new ones, and the command kept 0.2's names."""
    import dna_video
    import dna_video.tools.predict as command

    for old in PREDICTION_0_2:
        assert dna_video.MOVED_IN_0_3[old][0].startswith(("dna_video.prediction", "dna_video.tools.predict")), old
        assert not (REPO / (old.replace(".", "/") + ".py")).exists() and not (REPO / old.replace(".", "/")).is_dir()
    assert [name for name in PREDICT_COMMAND_0_2 if not hasattr(command, name)] == []
    # One object under both names: a class of 0.2 is the class of 0.3.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from dna_video.analysis.inference import LoadedModel
        from dna_video.runtime.model import OnnxModel
    from dna_video.prediction.onnx_backend import OnnxModel as onnx_model
    from dna_video.prediction.torch_backend import TorchModel

    assert LoadedModel is TorchModel and OnnxModel is onnx_model


def test_the_0_2_onnx_predict_command_runs_the_one_predict(capsys, monkeypatch):
    """``python -m dna_video.tools.predict_onnx`` (0.2) runs ``python -m dna_video.tools.predict``."""
    import runpy

    for name in ("dna_video.tools.predict_onnx", "dna_video.tools.predict"):
        if name in sys.modules:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "argv", ["dna_video.tools.predict_onnx", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("dna_video.tools.predict_onnx", run_name="__main__", alter_sys=True)
    out, err = capsys.readouterr()
    assert exit_info.value.code in (0, None), err[-2000:]
    assert ("python -m dna_video.tools.predict_onnx is now python -m dna_video.tools.predict (README, Commands); "
            "the old path goes in 0.4") in err
    assert out.startswith("usage: dna-video predict")


# The old commands: old module -> what the note says it is now.
OLD_COMMANDS = {"dna_video.predict": "python -m dna_video.tools.predict",
                "dna_video.checkpoints": "python -m dna_video.tools.checkpoints",
                "dna_video.probe": "dna-video", "dna_video.image_cli": "dna-video"}


@pytest.mark.slow
def test_old_python_m_command_runs_the_new_one_in_a_real_process(tmp_path):
    """One real ``python -m OLD`` (the interpreter's own module lookup); the others run in this
    process below, the same way (most of a process's time is importing torch and Lightning)."""
    old = "dna_video.predict"
    result = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True, cwd=tmp_path,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"python -m {old} is now {OLD_COMMANDS[old]}" in result.stderr
    assert "usage:" in result.stdout


@pytest.mark.parametrize("old", [old for old in OLD_COMMANDS if old != "dna_video.predict"])
def test_old_python_m_commands_run_the_new_ones(old, capsys, monkeypatch):
    """``python -m OLD --help`` as the interpreter runs it (``runpy.run_module`` as __main__,
    which asks the moved-module finder for OLD's code), in this process."""
    import runpy

    import dna_video

    # Looked up afresh, as in a new process: the finder's code for OLD, and no warning that
    # the module it runs is already imported (sys.modules is restored afterwards).
    target = dna_video.MOVED.get(old, dna_video.MOVED.get(f"{old}.__main__"))[1]
    for name in (old, f"{old}.__main__", target.partition(":")[0]):
        if name in sys.modules:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "argv", [old, "--help"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module(old, run_name="__main__", alter_sys=True)
    out, err = capsys.readouterr()
    assert exit_info.value.code in (0, None), err[-2000:]
    assert f"python -m {old} is now {OLD_COMMANDS[old]}" in err
    assert "usage:" in out


def test_0_1_public_names_stay_and_the_package_imports_no_torch():
    import dna_video

    for name in PUBLIC_0_1:
        assert getattr(dna_video, name) is not None, name
    assert dna_video.timesformer("tiny", num_classes=2).num_classes == 2  # the builder, as in 0.1
    from dna_video.checkpoints import timesformer_from_checkpoint  # noqa: F401
    from dna_video.data import NTURGBD60, ToyotaSmarthome  # noqa: F401
    from dna_video.timesformer import TimeSformer

    assert TimeSformer is dna_video.TimeSformer
    code = "import sys, dna_video; print(dna_video.__version__, 'torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["0.2.0", "False"], result.stderr


@pytest.mark.slow
def test_the_0_1_example_configs_build_their_task_with_the_0_1_option_names_read_as_0_2(tmp_path, caplog):
    """configs/*.yaml as 0.1 shipped them (no model.class_path, flat option names): the video one
    through the one command, the probe and image ones through their old commands."""
    from dna_video.tasks import ImageClassifier, ProbeClassifierModule, VideoClassifier
    from dna_video.training.cli import main
    from dna_video.training.legacy import image_main, probe_main

    configs = FIXTURES / "configs"
    caplog.set_level("WARNING", logger="dna_video")
    video = main(["--config", str(configs / "quickstart.yaml"), f"--data.init_args.root={tmp_path / 'v'}",
                  "--trainer.logger=false"], run=False).model
    assert type(video) is VideoClassifier and video.network.arch == "tiny" and video.schedule.warmup_steps == 40
    assert "model.arch, model.drop_path_rate, model.head_dropout, model.warmup_steps" in caplog.text
    probe = probe_main(["--config", str(configs / "probe_quickstart.yaml"), f"--data.init_args.root={tmp_path / 'v'}",
                        "--trainer.logger=false", "--model.init_from=null"], run=False).model
    assert type(probe) is ProbeClassifierModule and probe.probe_options.num_probes == 16
    assert probe.schedule.warmup_steps == 20 and probe.init.source is None  # --model.init_from, read as init.source
    image = image_main(["--config", str(configs / "images_quick.yaml"), f"--data.init_args.root={tmp_path / 'i'}",
                        "--trainer.logger=false"], run=False).model
    assert type(image) is ImageClassifier and image.hparams.net_kwargs["depth"] == 4


# -- 0.2 -> 0.3 -------------------------------------------------------------------------------------

# Names 0.2 code imports from each 0.2 module path that moved in 0.3 (its __all__).
NAMES_0_2 = {
    "dna_video.checkpoints.export": ["export_huggingface", "export_reference", "reference_attentions", "reference_cfg"],
    "dna_video.checkpoints.deploy": ["ExportError", "INPUT_NAME", "OUTPUT_NAME", "PT2_METADATA_FILE", "runtime_metadata",
                                     "export_program", "export_onnx", "export_pt2", "read_metadata", "load_pt2",
                                     "INT8_SUFFIX", "int8_path", "require_quantization", "quantize_onnx"],
    "dna_video.checkpoints.card": ["model_card", "weights_history", "Origin"],
    "dna_video.checkpoints.run_summary": ["SUMMARY_FILE", "read_summary", "fit_summary"],
    "dna_video.common.run_folders": ["RUN_FILES", "run_files", "evaluation_folder"],
    **PREDICTION_0_2,
}


def test_0_2_module_paths_moved_in_0_3_import_their_new_module_and_say_when_they_go():
    import dna_video

    assert set(dna_video.MOVED_IN_0_3) == set(NAMES_0_2)
    for old, (new, _, _) in dna_video.MOVED_IN_0_3.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        assert f"{old} moved to {new} in dna-video 0.3; the old path goes in 0.4" in messages, messages
        for name in NAMES_0_2[old]:
            assert getattr(module, name) is not None, (old, name)
    # A 0.1 path still says 0.2, whichever way it was retargeted since, and goes with 0.2's in 0.4.
    sys.modules.pop("dna_video.callbacks.summary", None)
    with pytest.warns(DeprecationWarning, match=r"dna_video.callbacks.summary moved to dna_video.runs.summary in "
                                                r"dna-video 0.2; the old path goes in 0.4"):
        importlib.import_module("dna_video.callbacks.summary")


def test_0_2_names_of_moved_functions_resolve_with_a_warning():
    """``dna_video.checkpoints.export_huggingface`` / ``export_reference`` (the checkpoints layer
    imports nothing of the export folder above it: looked up by name), and the registry's names
    once in ``dna_video.training.runs``."""
    import dna_video.checkpoints as checkpoints
    import dna_video.training.runs as training_runs
    from dna_video.export import huggingface, reference
    from dna_video.runs import registry

    for name, module in (("export_huggingface", huggingface), ("export_reference", reference)):
        with pytest.warns(DeprecationWarning, match=rf"dna_video.checkpoints.{name} moved to {module.__name__} in "
                                                    r"dna-video 0.3; the old path goes in 0.4"):
            assert getattr(checkpoints, name) is getattr(module, name)
    for name in ("RunRecord", "record_run", "REGISTRY"):
        with pytest.warns(DeprecationWarning, match=rf"dna_video.training.runs.{name} moved to dna_video.runs.registry"):
            assert getattr(training_runs, name) is getattr(registry, name)
    with pytest.raises(AttributeError):
        checkpoints.export_onnx  # noqa: B018 - never exported there


# What 0.1's dna_video.runs (then one module) defined.
RUNS_0_1 = ["REGISTRY", "VERSION_ARGUMENT", "NAME_ARGUMENT", "NETWORK_HPARAMS", "IGNORED_HPARAMS", "RestoreError",
            "read_run_checkpoint", "compare_hparams", "AtomicCheckpointIO", "Experiment", "RunRecord", "record_run",
            "find_latest_run", "run_of_checkpoint", "set_logger_version", "keep_csv_metrics", "prepare_restore"]


def test_0_1_dna_video_runs_names_resolve_in_the_runs_room():
    """``dna_video.runs`` is a package again (what a run left behind): 0.1's names that live in it
    resolve silently; those that need Lightning resolve from dna_video.training.runs with a
    warning, the same objects."""
    import dna_video.runs as runs
    import dna_video.training.runs as training_runs

    for name in RUNS_0_1:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(runs, name)
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        if name in vars(runs):
            assert not messages, (name, messages)
        else:
            assert messages == [f"dna_video.runs.{name} moved to dna_video.training.runs in dna-video 0.2; the old "
                                "path goes in 0.4"], (name, messages)
            assert value is getattr(training_runs, name)
    assert runs.RestoreError is training_runs.RestoreError  # one class: errors raised by either are caught by both


def test_0_2_export_verbs_run_the_export_command_with_a_note(tmp_path, capsys):
    """``checkpoints export-ref`` / ``export-hf`` print one note naming ``export reference`` /
    ``export huggingface`` on stderr and write what the new command writes."""
    from dna_video.export.reference import export_reference
    from dna_video.models.timesformer import TimeSformer
    from dna_video.tools.checkpoints import main as checkpoints_main
    from dna_video.tools.export import main as export_main

    geometry = dict(num_classes=3, num_frames=4, img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2)
    for attention in ("dna", "softmax"):
        export_reference(TimeSformer(attention=attention, **geometry), tmp_path / f"{attention}.pyth")
    capsys.readouterr()
    cases = [("export-ref", "reference", "dna.pyth", "--epoch", "3"), ("export-hf", "huggingface", "softmax.pyth")]
    for old, new, source, *options in cases:
        args = [str(tmp_path / source), "--num-heads", "2", *options]
        assert checkpoints_main([old, *args[:1], str(tmp_path / f"old_{new}"), *args[1:]]) == 0
        old_out, old_err = capsys.readouterr()
        assert old_err == (f"note: dna-video checkpoints {old} is now dna-video export {new} (README, Commands); "
                           "the old verb goes in 0.4\n")
        assert export_main([new, *args[:1], str(tmp_path / f"new_{new}"), *args[1:]]) == 0
        new_out, new_err = capsys.readouterr()
        assert new_err == "" and old_out == new_out.replace(f"new_{new}", f"old_{new}")
    old, new = (torch.load(tmp_path / f"{which}_reference", weights_only=True) for which in ("old", "new"))
    assert old["epoch"] == new["epoch"] == 3 and old["cfg"] == new["cfg"]
    assert old["model_state"].keys() == new["model_state"].keys()
    for key, value in new["model_state"].items():
        torch.testing.assert_close(old["model_state"][key], value, rtol=0, atol=0)
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "old_huggingface" / name).read_bytes() == (tmp_path / "new_huggingface" / name).read_bytes()


# Every renamed option of the video and probe modules: a distinctive value in its old name, and
# where it must land (written out here, not read from the table under test).
OLD_OPTIONS = {
    "arch": ("network.arch", "small"),
    "attention": ("network.attention", "softmax"),
    "temporal_attention": ("network.temporal_attention", "softmax"),
    "spatial_attention": ("network.spatial_attention", "softmax"),
    "attention_kwargs": ("network.attention_kwargs", {"alpha_init": 0.25}),
    "drop_path_rate": ("network.drop_path_rate", 0.37),
    "head_dropout": ("network.head_dropout", 0.21),
    "grad_checkpointing": ("network.grad_checkpointing", True),
    "compile": ("network.compile", True),
    "net_kwargs": ("network.depth", 3),  # a dict whose entries join network
    "init_from": ("init.source", "CHECKPOINT"),
    "init_strict": ("init.strict", True),
    "dna_init": ("init.dna_init", "orthogonal"),
    "init_kwargs": ("init.negate_v_neg", True),  # a dict whose entries join init
    "lr_scheduler_interval": ("schedule.interval", "step"),
    "lr_scheduler_monitor": ("schedule.monitor", "val/top1"),
    "warmup_steps": ("schedule.warmup_steps", 7),
    "view_aggregation": ("evaluation.view_aggregation", "max"),
    "aggregate": ("evaluation.aggregate", "probs"),
    "eval_chunk_size": ("evaluation.chunk_size", 5),
    "num_probes": ("probe.num_probes", 3),
    "probe_layers": ("probe.layers", [-1]),
    "cross_attention": ("probe.cross_attention", "softmax"),
    "interaction": ("probe.interaction", "residual"),
    "init_probes_from_backbone": ("probe.init_from_backbone", False),
    "neg_init": ("probe.neg_init", "orthogonal"),
    "neg_init_eps": ("probe.neg_init_eps", 0.003),
    "cross_alpha_init": ("probe.alpha_init", 0.25),
    # renamed in 0.3
    "pair_seed": ("init.pair_seed", 11),
}
PROBE_ONLY = {"num_probes", "probe_layers", "cross_attention", "interaction", "init_probes_from_backbone",
              "neg_init", "neg_init_eps", "cross_alpha_init"}


def _options(model) -> dict:
    """Every option of a built video / probe module, dotted: the groups as the module holds
    them, the rest as its hyper-parameters."""
    from dataclasses import asdict

    groups = {"network": model.network, "init": model.init, "schedule": model.schedule, "evaluation": model.evaluation}
    if hasattr(model, "probe_options"):
        groups["probe"] = model.probe_options
    out = {k: v for k, v in model.hparams.items() if k not in groups and not k.startswith("_")}
    for group, value in groups.items():
        out.update({f"{group}.{k}": v for k, v in asdict(value).items()})
    return out


@pytest.fixture(scope="module")
def build_old(tmp_path_factory):
    """A module built by the command from a config in old option names (a tiny network, small
    clips), and its options."""
    from dna_video.models.timesformer import timesformer
    from dna_video.training.cli import main

    folder = tmp_path_factory.mktemp("old_options")
    checkpoint = folder / "tiny.pth"
    torch.save(timesformer("tiny", num_classes=5, num_frames=4, img_size=32).state_dict(), checkpoint)

    baselines: dict = {}

    def build(options: dict, probe: bool) -> dict:
        if options == {"arch": "tiny"} and probe in baselines:
            return baselines[probe]
        options = {key: str(checkpoint) if value == "CHECKPOINT" else value for key, value in options.items()}
        model = {"class_path": "dna_video.tasks.ProbeClassifierModule", "init_args": options} if probe else options
        data = {"class_path": "dna_video.data.SyntheticSmarthome",
                "init_args": {"root": str(folder / "videos"), "num_frames": 4, "crop_size": 32}}
        config = folder / "old.yaml"
        config.write_text(yaml.safe_dump({"model": model, "data": data}))
        built = _options(main(["--config", str(config), "--trainer.logger=false"], run=False).model)
        if options == {"arch": "tiny"}:
            baselines[probe] = built
        return built

    return build, str(checkpoint)


def test_the_table_covers_every_renamed_option():
    from dna_video.checkpoints.upgrade import RENAMED_OPTIONS

    assert set(OLD_OPTIONS) == set(RENAMED_OPTIONS)


@pytest.mark.parametrize("old", list(OLD_OPTIONS))
def test_each_old_option_lands_in_its_new_place_and_nowhere_else(old, build_old):
    """(issue 39.3) A config with a distinctive value in the old name builds a module whose new
    option holds that value; every other option is the default (the same config without it)."""
    build, checkpoint = build_old
    place, value = OLD_OPTIONS[old]
    given = {"net_kwargs": {"depth": 3}, "init_kwargs": {"negate_v_neg": True}}.get(old, value)
    probe = old in PROBE_ONLY
    baseline = build({"arch": "tiny"}, probe)
    built = build({"arch": "tiny", old: given}, probe)
    expected = checkpoint if value == "CHECKPOINT" else value
    assert {k: v for k, v in built.items() if baseline.get(k) != v} == {place: expected}


def test_a_format_2_checkpoint_with_pair_seed_loads_with_it_in_init(tmp_path):
    """Format 2 kept ``pair_seed`` beside the groups; format 3 has it in ``init``: an older
    checkpoint is upgraded on load, and the two names given at once must agree."""
    import lightning

    from dna_video.checkpoints import PretrainedWeights
    from dna_video.checkpoints.upgrade import FORMAT_KEY, upgrade_checkpoint, upgrade_model_options
    from dna_video.models.timesformer import TimeSformerSpec
    from dna_video.tasks import VideoClassifier

    module = VideoClassifier(num_classes=3, num_frames=2, img_size=16, network=TimeSformerSpec(arch="tiny", depth=1),
                             init=PretrainedWeights(pair_seed=5))
    hparams = dict(module.hparams)
    init = dict(hparams["init"])
    hparams.update(init={k: v for k, v in init.items() if k != "pair_seed"}, pair_seed=init["pair_seed"])
    path = tmp_path / "format2.ckpt"
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": hparams, FORMAT_KEY: 2,
                "pytorch-lightning_version": lightning.__version__}, path)
    restored = VideoClassifier.load_from_checkpoint(path)
    assert restored.init.pair_seed == 5
    for key, value in module.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
    upgraded = upgrade_checkpoint(torch.load(path, weights_only=True))
    assert upgraded[FORMAT_KEY] == 3 and "pair_seed" not in upgraded["hyper_parameters"]
    assert upgraded["hyper_parameters"]["init"]["pair_seed"] == 5
    with pytest.raises(ValueError, match=r"model.pair_seed \(3, its name before 0.3\) and model.init.pair_seed \(4\) disagree"):
        upgrade_model_options({"pair_seed": 3, "init": {"pair_seed": 4}})
