"""LoRA agents through PEFT: each agent trains its own adapter; homogeneous agents share one frozen base.

With `peft_config` set in a learner config, every agent becomes an
`AdapterAgent`: a named LoRA adapter on a PEFT model. Agents built from one
`agent_model` id or dir share a single base model in memory (N agents cost
about one base plus N adapters); before each generate or forward the agent
activates its own adapter. An `AdapterAgent` behaves like the HF model the
rest of the library expects (`generate`, forward, `device`, `config`,
`save_pretrained`), and its parameters and state dict are its adapter's only,
so optimizers, gradient all-reduce and checkpoints see exactly what trains.

`save_model` writes each agent as a PEFT adapter directory (load it with
`PeftModel.from_pretrained(base, dir)`), or as a full merged model with
`merge_adapters_on_save=True`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from typing import Any, Sequence

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

__all__ = ["AdapterAgent", "attach_adapters"]


class AdapterAgent(nn.Module):
    """One agent: the adapter `adapter_name` of a (possibly shared) PEFT model."""

    def __init__(self, peft_model: nn.Module, adapter_name: str, merge_on_save: bool = False) -> None:
        super().__init__()
        object.__setattr__(self, "peft", peft_model)  # not a submodule: a shared base is nobody's state
        self.adapter_name = adapter_name
        self.merge_on_save = merge_on_save
        marker = f".{adapter_name}."
        self.peft_names: dict[str, str] = {}  # our parameter name -> the PEFT model's
        for name, param in peft_model.named_parameters():
            if marker in name:
                param.requires_grad_(True)  # PEFT freezes inactive adapters; activate() toggles it per use
                self.register_parameter(name.replace(".", "__"), param)
                self.peft_names[name.replace(".", "__")] = name
        if not list(self.parameters()):
            raise ValueError(f"adapter {adapter_name!r} has no parameters; check peft_config.target_modules.")

    def activate(self) -> nn.Module:
        """Make this agent's adapter the active one and return the PEFT model."""
        if self.peft.active_adapter != self.adapter_name:
            self.peft.set_adapter(self.adapter_name)
        return self.peft

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.activate()(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self.activate().generate(*args, **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def config(self) -> Any:
        return self.peft.config

    @property
    def generation_config(self) -> Any:
        return self.peft.generation_config

    @property
    def name_or_path(self) -> str:
        return getattr(self.peft.base_model.model, "name_or_path", "")

    def get_input_embeddings(self) -> nn.Module:
        return self.peft.get_input_embeddings()

    def to(self, *args: Any, **kwargs: Any) -> "AdapterAgent":
        self.peft.to(*args, **kwargs)
        return self

    def save_pretrained(self, path: str, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """An adapter dir (`adapter_config.json`, `adapter_model.safetensors`), or a merged full model.

        `state_dict`: the adapter weights to write, by this agent's `state_dict()` keys (e.g. gathered from
        FSDP shards); None: its own (the merged model always takes the live ones)."""
        if self.merge_on_save:
            twin = copy.deepcopy(self.peft)
            twin.set_adapter(self.adapter_name)
            twin.merge_and_unload(adapter_names=[self.adapter_name]).save_pretrained(path)
            return
        with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(path)) or ".") as tmp:
            weights = None if state_dict is None else {self.peft_names[k]: v for k, v in state_dict.items()}
            self.peft.save_pretrained(tmp, selected_adapters=[self.adapter_name], state_dict=weights)
            # PEFT nests non-"default" adapters in a subdirectory named after them.
            source = os.path.join(tmp, self.adapter_name)
            source = source if os.path.isdir(source) else tmp
            os.makedirs(path, exist_ok=True)
            for name in os.listdir(source):
                shutil.move(os.path.join(source, name), os.path.join(path, name))
        _name_the_base_class(os.path.join(path, "adapter_config.json"), self.peft.get_base_model())


def _name_the_base_class(config_file: str, base: nn.Module) -> None:
    """PEFT records the base model's class in `auto_mapping` for `AutoPeftModelForCausalLM`; a base sharded with
    FSDP is of the class FSDP made for it (`FSDPQwen2ForCausalLM`, which no library exports): record the
    transformers class it wraps instead, so the adapter loads anywhere."""
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)
    mapping = config.get("auto_mapping")
    cls = next(c for c in type(base).__mro__ if not issubclass(c, FSDPModule))
    if not mapping or mapping.get("base_model_class") == cls.__name__:
        return
    config["auto_mapping"] = {**mapping, "base_model_class": cls.__name__, "parent_library": cls.__module__}
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def attach_adapters(models: Sequence[nn.Module], peft_config: Any, merge_on_save: bool = False,
                    model_index: Sequence[int] | None = None) -> list[AdapterAgent]:
    """Give each agent an adapter on its model; agents that are the same model object share one base.

    `model_index[a]` (`learners.models.agents.model_groups`) says which agents are one policy (self-play):
    they get ONE adapter, named after the first of them, so all their parameter tensors are shared.
    Default: every agent its own adapter `agent_{a}`, also when they sit on one shared base.
    """
    from peft import LoraConfig, get_peft_model  # PEFT is the optional extra `comlrl-env[peft]`

    config = LoraConfig(**peft_config) if isinstance(peft_config, dict) else peft_config
    model_index = list(range(len(models))) if model_index is None else list(model_index)
    wrapped: dict[int, nn.Module] = {}
    adapters: dict[int, AdapterAgent] = {}
    out = []
    for a, (model, policy) in enumerate(zip(models, model_index, strict=True)):
        if policy not in adapters:
            name = f"agent_{a}"
            if id(model) not in wrapped:
                wrapped[id(model)] = get_peft_model(model, copy.deepcopy(config), adapter_name=name)
            else:
                wrapped[id(model)].add_adapter(name, copy.deepcopy(config))
            adapters[policy] = name
        out.append(adapters[policy])
    for peft_model in wrapped.values():
        peft_model.eval()  # as every agent: no dropout (PEFT's new modules, lora_dropout included, start in train mode)
    agents: dict[str, AdapterAgent] = {}
    for model, name in zip(models, out):
        if name not in agents:
            agents[name] = AdapterAgent(wrapped[id(model)], name, merge_on_save)
    return [agents[name] for name in out]
