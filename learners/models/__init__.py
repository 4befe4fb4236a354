"""The models a team trains or plays with: loading agents and tokenizers (`agents.py`), LoRA adapters
(`lora.py`), critics and value heads (`critics.py`), fixed seats (`fixed.py`) and saved agents as a
benchmark policy (`policy.py`). May import `comlrl_env`, `learners.rollout` and `learners.parallel`.
"""

from learners.models.agents import convert_gguf, load_agents, load_causal_lm, prepare_tokenizer
from learners.models.critics import CausalLMWithValueHead, ValueHead
from learners.models.fixed import Frozen
from learners.models.lora import AdapterAgent
from learners.models.policy import AgentPolicy

__all__ = ["AdapterAgent", "AgentPolicy", "CausalLMWithValueHead", "Frozen", "ValueHead", "convert_gguf",
           "load_agents", "load_causal_lm", "prepare_tokenizer"]
