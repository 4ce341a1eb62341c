"""TrainConfig: YAML loading, CLI overrides, and clear errors."""

from pathlib import Path
import dataclasses

import pytest

from training.config import TrainConfig, load_config, save_config
from training.infra.config_values import parse_value


def test_yaml_then_cli_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algo: gigpo\nn_groups: 4\npaw: true\nrho: 0.3\ncritic_lr: 2e-5\n"
                    "env_kwargs: {split: train, num_products: 50}\n")
    config = load_config(path, {"paw": False, "rho": 0.5, "history_length": None, "lr": 5e-5,
                                "lora_target_modules": ["q_proj", "v_proj"],
                                "env_kwargs": {"split": "test"}})
    assert (config.algo, config.n_groups, config.paw, config.rho) == ("gigpo", 4, False, 0.5)
    assert config.history_length is None and config.lr == 5e-5 and config.critic_lr == 2e-5
    assert config.lora_target_modules == ["q_proj", "v_proj"]
    # A mapping override is merged over the file's: the file's other keys stay.
    assert config.env_kwargs == {"split": "test", "num_products": 50}


def test_save_and_load_round_trip(tmp_path):
    config = TrainConfig(algo="rloo", alpha=0.5, env_kwargs={"split": "train"})
    save_config(config, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == config


def test_every_field_has_a_docstring():
    from training.config import field_docs
    from training.warmstart.sft import SFTConfig
    from training.world_model.config import WorldModelConfig

    for cls in (TrainConfig, SFTConfig, WorldModelConfig):
        missing = [f.name for f in dataclasses.fields(cls) if not field_docs(cls).get(f.name)]
        assert not missing, cls


def test_the_model_and_paw_settings_are_declared_once():
    """train, sft and train-wm take ModelConfig's fields (sft and train-wm redeclare only
    their defaults: the tiny model, every weight trained); TrainConfig's world-model fields
    are PaWSettings', so each has one declaration (its range, its docstring)."""
    from training.config import field_docs
    from training.infra.model_config import ModelConfig
    from training.infra.paw_settings import PaWSettings
    from training.warmstart.sft import SFTConfig
    from training.world_model.config import WorldModelConfig

    model_fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    for cls in (TrainConfig, SFTConfig, WorldModelConfig):
        assert issubclass(cls, ModelConfig)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in model_fields.keys() - {"model", "lora"}:
            assert fields[name] is model_fields[name] or \
                fields[name].metadata == model_fields[name].metadata, (cls, name)
        assert field_docs(cls)["lora_r"] == field_docs(ModelConfig)["lora_r"]
    assert (SFTConfig().model, SFTConfig().lora) == ("runs/tiny-model", False)
    assert (WorldModelConfig().model, WorldModelConfig().lora) == ("runs/tiny-model", False)
    assert TrainConfig().lora and TrainConfig().model == ModelConfig().model
    assert issubclass(TrainConfig, PaWSettings)
    assert PaWSettings.values_of(TrainConfig(alpha=0.5, rho=0.1)) == \
        dataclasses.asdict(PaWSettings(alpha=0.5, rho=0.1))


def test_train_wm_refuses_lora_dropout_and_sft_trains_with_it():
    from training.warmstart.sft import SFTConfig
    from training.world_model.config import WorldModelConfig

    with pytest.raises(ValueError, match="^lora_dropout=0.1 is invalid; expected 0 for train-wm"):
        WorldModelConfig(lora=True, lora_dropout=0.1)
    assert SFTConfig(lora=True, lora_dropout=0.1).lora_dropout == 0.1


@pytest.mark.parametrize("values, message", [
    ({"algo": "dpo"}, "algo='dpo'"),
    ({"wm_loss": "l2"}, "wm_loss='l2'"),
    ({"alpha": 0.0}, "alpha=0.0"),
    ({"n_groups": 0}, "n_groups=0"),
    ({"entropy_coef": -0.1}, "entropy_coef=-0.1"),
    ({"max_prompt_len": 0}, "max_prompt_len=0"),
    ({"entropy_score": "token"}, "entropy_score='token'"),
    ({"nonsense": 1}, "unknown config key"),
    # Once silently accepted (issue 17): truthy non-bools, truncated floats, no-op budgets.
    ({"paw": 3}, "paw=3 is invalid; expected true or false"),
    ({"n_groups": 1.5}, "n_groups=1.5 is invalid; expected an integer"),
    ({"lr": "fast"}, "lr: expected a number, got 'fast'"),
    ({"max_obs_tokens": -5}, "max_obs_tokens=-5"),
    ({"max_episode_steps": 0}, "max_episode_steps=0"),
    ({"save_every": -1}, "save_every=-1"),
    ({"total_steps": 0}, "total_steps=0"),
    ({"keep_checkpoints": 0}, "keep_checkpoints=0"),
    ({"device": "gpu"}, "device='gpu' is invalid; expected cpu, cuda, cuda:N, mps"),
    ({"lr": -1}, "lr=-1 is invalid; expected a learning rate in \\[0, 1\\]"),
    ({"critic_lr": -0.5}, "critic_lr=-0.5"),
    ({"history_length": -1}, "history_length=-1"),
    # Issue 29: what FSDP does not take yet, and mixed precision's needs.
    ({"sharding": "fsdp"}, "sharding='fsdp' does not take lora=True"),
    ({"mixed_precision": "bf16", "lora": False, "dtype": "float32"},
     r"mixed_precision='bf16' computes in bfloat16 over float32 weights sharded by FSDP: it needs "
     r"sharding: fsdp and dtype: float32 \(got sharding='ddp', dtype='float32'\)"),
    # Issue 27: silently accepted before, each ruining a run.
    ({"lr": float("inf")}, "lr=inf is invalid; expected a number \\(finite\\)"),
    ({"max_grad_norm": float("nan")}, "max_grad_norm=nan is invalid"),
    ({"temperature": float("inf")}, "temperature=inf is invalid"),
    ({"gamma": float("nan")}, "gamma=nan is invalid"),
    ({"group_size": 1}, "group_size=1 is invalid; expected an integer >= 2 for algo='grpo'"),
    ({"clip_eps": -1}, "clip_eps=-1 is invalid; expected a number in \\(0, 100\\]"),
    ({"kl_coef": -1}, "kl_coef=-1 is invalid; expected a number in \\[0, 1000\\]"),
    ({"warmup_steps": -5}, "warmup_steps=-5 is invalid"),
    ({"lora_r": 0}, "lora_r=0 is invalid"),
    ({"lora_dropout": 2.0}, "lora_dropout=2.0 is invalid; expected a probability in \\[0, 1\\)"),
    ({"lora_dropout": 0.1}, "lora_dropout=0.1 is invalid; expected 0 in RL training"),
    ({"logits_chunk": 0}, "logits_chunk=0 is invalid"),
    ({"train_task_seeds": 0}, "train_task_seeds=0 is invalid"),
    ({"seed": 2**70}, "seed=1180591620717411303424 is invalid"),
    ({"temperature": 0.0}, "temperature=0.0 is invalid; expected a number in \\(0, 100\\]"),
])
def test_bad_values_are_named(values, message):
    with pytest.raises(ValueError, match=message):
        load_config(None, values)


def test_a_yaml_typo_gets_the_nearest_key_and_not_the_whole_list(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("total_stepz: 5\n3: x\n")
    with pytest.raises(ValueError) as raised:
        load_config(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: unknown config key(s) 'total_stepz' (did you mean "
                              "total_steps?), 3;")
    assert "wm_context" not in message  # not a dump of every field
    assert len(message.splitlines()) == 1


def test_wrong_types_given_in_python_are_named():
    with pytest.raises(ValueError, match="lr='fast' is invalid; expected a number"):
        TrainConfig(lr="fast")
    with pytest.raises(ValueError, match="max_prompt_len=True is invalid; expected an integer or none"):
        TrainConfig(max_prompt_len=True)
    assert TrainConfig(lr=1).lr == 1  # an int is a number


def test_text_values_are_read_as_the_field_type():
    from typing import Any, Literal

    assert parse_value("5e-5", float) == 5e-5 and parse_value("none", int | None) is None
    assert parse_value("q_proj", list[str]) == ["q_proj"]
    assert parse_value("q_proj, v_proj", list[str]) == parse_value("[q_proj, v_proj]",
                                                                   list[str]) == ["q_proj", "v_proj"]
    assert parse_value("split=test,n=8,tasks=[a, b]", dict[str, Any]) == {
        "split": "test", "n": 8, "tasks": ["a", "b"]}
    assert parse_value("ppo", Literal["grpo", "ppo"]) == "ppo"
    for raw, kind, message in [("2.5", int, "expected an integer, got '2.5'"),
                               ("maybe", bool, "expected true or false"),
                               ("dpo", Literal["grpo", "ppo"], "expected one of grpo | ppo"),
                               ("none", int, "expected an integer, got 'none'"),
                               ("split", dict[str, Any], "item 'split' is not key=value")]:
        with pytest.raises(ValueError, match=message):
            parse_value(raw, kind)


def test_other_configs_get_their_types_checked_too(tmp_path):
    from training.warmstart.sft import SFTConfig

    path = tmp_path / "sft.yaml"
    path.write_text("epochs: 2.5\n")
    with pytest.raises(ValueError, match="epochs=2.5 is invalid; expected an integer"):
        load_config(path, cls=SFTConfig)


PAPER = Path(__file__).resolve().parents[1] / "configs" / "paper"


def test_paper_configs_read_the_official_data_from_environment_variables(monkeypatch):
    from training.config import DATA_VARIABLES

    for name in DATA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r"env_kwargs.data_dir uses \$\{WEBSHOP_DATA\}, which is "
                                         r"not set: set WEBSHOP_DATA to a folder with WebShop's"):
        load_config(PAPER / "webshop_qwen2.5-1.5b_grpo_paw.yaml")
    for name in DATA_VARIABLES:
        monkeypatch.setenv(name, f"/data/{name.lower()}")
    assert load_config(PAPER / "webshop_qwen2.5-1.5b_grpo_paw.yaml").env_kwargs == {
        "data_dir": "/data/webshop_data", "num_products": None}
    assert load_config(PAPER / "alfworld_qwen2.5-7b_gigpo_paw.yaml").env_kwargs == {
        "data_dir": "/data/alfworld_data"}
    assert load_config(PAPER / "searchqa_qwen2.5-3b_grpo_paw.yaml").env_kwargs == {
        "dataset": "/data/searchqa_train", "retriever": "/data/searchqa_retriever"}
    for config in PAPER.glob("*.yaml"):  # every file runs the paper's data, none the embedded
        assert load_config(config).env_kwargs, config.name


def test_paper_configs_cover_table_3_backbones_and_ppo_with_128_environments(monkeypatch):
    from training.config import DATA_VARIABLES

    for name in DATA_VARIABLES:
        monkeypatch.setenv(name, "/data")
    models = {load_config(f).model for f in PAPER.glob("webshop_*_grpo_paw.yaml")}
    assert {"Qwen/Qwen3-1.7B", "meta-llama/Llama-3.2-3B-Instruct",
            "Qwen/Qwen2.5-14B-Instruct"} <= models
    ppo = load_config(PAPER / "webshop_qwen2.5-1.5b_ppo_paw.yaml")
    assert (ppo.algo, ppo.n_groups, ppo.group_size) == ("ppo", 128, 1)


def test_unset_variables_anywhere_are_named(monkeypatch, tmp_path):
    from training.config import expand_variables

    monkeypatch.setenv("HERE", "x")
    assert expand_variables({"a": ["${HERE}/y", 3]}, "cfg") == {"a": ["x/y", 3]}
    monkeypatch.delenv("NOPE_VAR", raising=False)
    with pytest.raises(ValueError, match=r"cfg.a\[1\] uses \$\{NOPE_VAR\}, which is not set"):
        expand_variables({"a": ["ok", "${NOPE_VAR}"]}, "cfg")
    # The shell's form too: `output_dir: $HOME/x` once made a folder named '$HOME'.
    assert expand_variables("$HERE/y and ${HERE}", "cfg") == "x/y and x"
    with pytest.raises(ValueError, match=r"cfg uses \$\{NOPE_VAR\}, which is not set"):
        expand_variables("$NOPE_VAR/runs", "cfg")
    assert expand_variables("costs $5", "cfg") == "costs $5"  # not a variable name


def test_a_key_given_twice_in_a_yaml_file_is_an_error(tmp_path):
    config = tmp_path / "twice.yaml"
    config.write_text("lr: 1e-3\nenv_kwargs: {split: dev}\nlr: 2e-3\n")
    with pytest.raises(ValueError, match=r"twice.yaml: not valid YAML at line 3, column 1 \(the "
                                         r"key 'lr' is given twice\)"):
        load_config(config)
    config.write_text("? [a, b]\n: 1\n")  # a key YAML cannot hash: still one line
    with pytest.raises(ValueError, match=r"twice.yaml: not valid YAML .*unhashable key"):
        load_config(config)


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("lr: 1e-3\nmodel: [unclosed\n")
    with pytest.raises(ValueError, match=r"bad.yaml: not valid YAML at line 3"):
        load_config(config)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_config(tmp_path / "nope.yaml")


def test_package_exports_trainer_and_config_lazily():
    import training

    assert training.TrainConfig is TrainConfig
    from training.trainer import PaWTrainer

    assert training.PaWTrainer is PaWTrainer
    with pytest.raises(AttributeError, match="nope"):
        training.nope  # noqa: B018


@pytest.mark.parametrize("values, message", [
    # saved the base as is:
    ({"epochs": -1}, "epochs=-1 is invalid; expected an integer in \\[1, 10,000\\]"),
    ({"lr": float("inf")}, "lr=inf is invalid; expected a number \\(finite\\)"),  # NaN weights
    ({"max_grad_norm": 0}, "max_grad_norm=0 is invalid"),
    ({"token_budget": 0}, "token_budget=0 is invalid"),
])
def test_sft_settings_are_checked_when_made(values, message):
    from training.warmstart.sft import SFTConfig

    with pytest.raises(ValueError, match=message):
        SFTConfig(**values)
    with pytest.raises(ValueError, match=message):
        load_config(None, values, cls=SFTConfig)
