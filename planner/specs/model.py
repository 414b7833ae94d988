"""The model and its training job: architecture (dense, MoE, MLA, windows), batch, precision, stack."""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from planner.errors import SpecError, shown
from planner.specs.base import Spec, is_plain_name
from planner.specs.hybrid import MLP, DeltaNetSpec, MambaSpec, pattern_error, pattern_layers_before
from planner.specs.layers import LayerKind, attention_matrices, layer_kinds, layer_norm_params, mlp_matrices
from planner.specs.precision import PRECISIONS, Precision, precision
from planner.specs.shipped import DEFAULT_STACK, stack_file, stack_loaded, unknown_stack_message
from planner.specs.stack import StackSpec

if TYPE_CHECKING:  # numpy is imported where arrays are computed: a model file's check needs none
    import numpy as np

# Megatron-Core --recompute-modules (transformer_config.py) the planner prices
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "shared_experts", "mla_up_proj", "moe")
# Modules whose recomputation the MoE layer's (moe) already includes (its experts' activation, its shared experts)
_WITHIN_MOE = ("moe_act", "shared_experts")


def _stack_profile(value):
    """A stack named by a shipped profile becomes that profile; a mapping is an inline profile.
    A broken shipped profile is reported against its own file (a SpecError passes through
    pydantic unchanged)."""
    if not isinstance(value, str):
        return value
    if not is_plain_name(value):
        raise ValueError(f"software stack {shown(value)} is not a shipped profile name (a plain name of at most "
                         "128 characters, not a path); give your own profile as a mapping")
    if stack_file(value) is None:
        raise ValueError(unknown_stack_message(value))
    data, loaded = stack_loaded(value)
    try:
        return StackSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        raise SpecError(f"stack profile '{value}': {err['msg']}", file=loaded.file, line=loaded.line_of(loc),
                        path=".".join(map(str, loc)) or None) from None


class TrainingSpec(Spec):
    global_batch: int = Field(gt=0, le=100_000_000, description="sequences per optimizer step")
    precision: Literal[tuple(PRECISIONS)] = "bf16"  # type: ignore[valid-type]  # planner/specs/precision.py
    stack: StackSpec = Field(default=DEFAULT_STACK, validate_default=True, description=(
        "software stack: a shipped profile (configs/stacks/) by name, or a profile mapping"))
    attention: Literal["flash", "standard"] = Field(
        default=None, validate_default=False,
        description="override of the stack's: flash: fused attention (no s^2 activations); standard: Megatron 2022 softmax path"
    )
    tp_comm_overlap: bool = Field(default=None, validate_default=False, description=(
        "override of the stack's: TP collectives overlapped with GEMMs (Transformer Engine userbuffers)"))
    dp_comm_overlap: bool = Field(default=None, validate_default=False, description=(
        "override of the stack's: gradient reduce-scatter / all-reduce overlapped with backward"))
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="token budget of the whole run")
    fp8_param_gather: bool = Field(default=False, description=(
        "FP8 parameters, gathered in FP8 by the distributed optimizer (Megatron --fp8-param-gather; fp8/mxfp8 only)"))
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise"] = Field(default="delayed", description=(
        "how per-tensor FP8 (precision fp8) is scaled (Megatron --fp8-recipe): delayed (the amax history, "
        "Megatron's default), tensorwise (current scaling: each tensor's amax read first; Megatron-Bridge's "
        "FP8-CS, torchao's Float8 tensorwise) or blockwise (1x128 / 128x128 scales: DeepSeek-V3's)"))
    grad_reduce_dtype: Literal["fp32", "bf16", "fp16"] = Field(default="fp32", description=(
        "main-grad buffer and data-parallel gradient reduce: fp32 (4 B per parameter) or bf16 (2 B; "
        "Megatron --grad-reduce-in-bf16, Megatron-Core DDP grad_reduce_in_fp32=False); fp16 (2 B): "
        "Megatron --fp16 without --accumulate-allreduce-grads-in-fp32, whose gradients keep the fp16 "
        "parameters' dtype"))
    moe_dispatcher: Literal["alltoall", "flex"] = Field(default="alltoall", description=(
        "MoE token dispatcher: alltoall (every routed copy to another NVLink domain crosses the network) or "
        "flex (DeepEP/HybridEP: a token crosses once per remote domain, then NVLink; "
        "Megatron --moe-token-dispatcher-type flex)"))
    moe_a2a_overlap: bool = Field(default=False, description=(
        "MoE dispatch/combine overlapped with another micro-batch's compute (combined 1F1B; Megatron "
        "--overlap-moe-expert-parallel-comm --delay-wgrad-compute)"))
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] = Field(
        default="none", description=(
            "CUDA graphs (Megatron --cuda-graph-impl): full_iteration replays the whole step, MoE dispatch "
            "with static per-rank shapes (--moe-expert-rank-capacity-factor): no host launch floor and no "
            "host sync per dropless MoE layer; local and transformer_engine graph parts of a layer, priced "
            "as none (dropless MoE dispatch outside them still syncs)"))
    te_op_fuser: bool = Field(default=False, description=(
        "MoE expert MLP through Transformer Engine's op fuser (Megatron --use-transformer-engine-op-fuser, "
        "Megatron-Bridge cutedsl_fused_grouped_mlp): a clamped GLU and the experts' output biases fused "
        "into the grouped GEMMs; off: they run as separate PyTorch ops"))
    torch_compile: bool = Field(default=False, description=(
        "torch.compile of each transformer block (torchtitan --compile.enable): Inductor fuses the block's "
        "elementwise ops; without it a stack whose model code runs them one PyTorch op at a time "
        "(StackSpec.eager_block_ops: torchtitan) pays their HBM passes"))
    offload: Literal["none", "optimizer", "activations", "both"] | None = Field(default=None, description=(
        "host-memory offload (planner/costs/offload.py): optimizer (fp32 master weights and Adam moments on the "
        "host, the Adam step on the CPU), activations (each layer's stored activations to the host in forward, back "
        "in backward), both, or none; fixes the layout axis as --offload does (unset: the search tries offload "
        "where layouts without it do not fit)"))
    offload_layers: int | None = Field(default=None, ge=1, le=10_000, description=(  # le: the bound on `layers`
        "layers whose activations an activation-offloading layout moves to the host (Megatron Core / Transformer "
        "Engine cpu_offloading_num_layers; at most a rank's layers - 1 are; unset: the fewest that fit the GPU's "
        "memory less the --memory-headroom, 5 % by default, planner/costs/offload.py)"))

    recompute_modules: tuple[Literal[RECOMPUTE_MODULES], ...] | None = Field(  # type: ignore[valid-type]
        default=None, strict=False, min_length=1, max_length=len(RECOMPUTE_MODULES), description=(
            "what a layout's selective recomputation recomputes (Megatron --recompute-modules; default: "
            "core_attn): core_attn, layernorm (the MoE layers' pre-MLP norm: TE fuses the others into "
            "their GEMM), mlp (dense MLP), moe_act (the experts' activation), shared_experts, "
            "mla_up_proj, moe (the whole MoE layer: router, dispatch and combine all-to-alls, experts and "
            "shared experts run forward again in the backward; only its input is kept)"))
    recompute_method: Literal["uniform", "block"] = Field(default="uniform", description=(
        "which layers a layout's full recomputation recomputes (Megatron --recompute-method): uniform: every "
        "layer, checkpointing the input of each group of recompute_num_layers layers of a model chunk and "
        "rebuilding a group at a time; block: only the first recompute_num_layers layers of each model "
        "chunk, the others store their activations as without recomputation"))
    recompute_num_layers: int = Field(default=1, gt=0, le=100_000, description=(
        "layers per checkpointed group (uniform) or recomputed per model chunk (block) under full "
        "recomputation (Megatron --recompute-num-layers; default 1: every layer its own checkpoint)"))

    _stack_name = field_validator("stack", mode="before")(_stack_profile)

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules_once(cls, v):
        # Before the length bound: [core_attn] x 8 is a repeat, not "more than 7 modules"
        if isinstance(v, (list, tuple)):
            seen = set()
            for m in v:
                if isinstance(m, str) and m in seen:
                    raise ValueError(f"recompute_modules lists {shown(m)} twice: name each module once")
                seen.add(m if isinstance(m, str) else None)
        return v

    @property
    def recomputed(self) -> tuple[str, ...]:
        """The modules selective recomputation recomputes; moe_act and shared_experts left out when
        moe is in (the MoE layer's recomputation rebuilds them: priced once)."""
        modules = self.recompute_modules or ("core_attn",)
        return tuple(m for m in modules if m not in _WITHIN_MOE) if "moe" in modules else modules

    @property
    def recompute_default_method(self) -> bool:
        """Whether full recomputation is Megatron's uniform over single layers (the planner's default)."""
        return self.recompute_method == "uniform" and self.recompute_num_layers == 1

    @property
    def numerics(self) -> Precision:
        """Bytes per value and peaks of this run's precision (planner/specs/precision.py)."""
        # torch.compile fuses torchao's current-scaling amax into the cast (torchtitan's Float8 runs compiled):
        # one read, as delayed scaling's; Transformer Engine's current scaling reads twice, compiled or not
        return precision(self.precision, self.fp8_param_gather, self.grad_reduce_dtype, self.fp8_recipe,
                         amax_fused=self.torch_compile and self.stack.eager_block_ops)

    @model_validator(mode="after")
    def _stack_defaults(self) -> "TrainingSpec":
        if self.fp8_param_gather and self.precision not in ("fp8", "mxfp8"):
            raise ValueError(f"fp8_param_gather needs precision fp8 or mxfp8, not {self.precision}")
        if self.grad_reduce_dtype == "fp16" and self.precision != "fp16":
            raise ValueError(f"grad_reduce_dtype fp16 needs precision fp16, not {self.precision}")
        if self.offload_layers is not None and self.offload in ("none", "optimizer"):
            raise ValueError(f"offload_layers counts layers whose activations move to the host, and offload "
                             f"{self.offload} moves none: give offload activations or both, or leave offload_layers out")
        # Unset overrides take the stack's choice (frozen model: set once, here).
        for key in ("attention", "tp_comm_overlap", "dp_comm_overlap"):
            if getattr(self, key) is None:
                object.__setattr__(self, key, getattr(self.stack, key))
        return self


class MoeSpec(Spec):
    """Mixture-of-experts MLPs (Megatron-Core's --num-experts, --moe-router-topk, --moe-ffn-hidden-size,
    --moe-shared-expert-intermediate-size, --moe-layer-freq)."""

    experts: int = Field(gt=0, le=1_000_000, description="routed experts per MoE layer")
    top_k: int = Field(gt=0, le=1_000_000, description="routed experts each token goes to")
    expert_ffn_hidden: int = Field(gt=0, le=10_000_000, description="FFN width of one routed expert")
    shared_experts: int = Field(default=0, ge=0, le=1024, description="experts every token goes to")
    shared_expert_ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000, description=(
        "FFN width of one shared expert (default: expert_ffn_hidden)"))
    dense_layers: int = Field(default=0, ge=0, le=10_000, description="the first k layers are dense")
    layer_every: int = Field(default=1, gt=0, le=10_000, description="after those, every n-th layer is MoE")
    capacity_factor: float | None = Field(default=None, gt=0, le=1000, description=(
        "tokens an expert takes, relative to an even share (null: dropless)"))
    load_imbalance: float = Field(default=1.0, ge=1, le=1000, description=(
        "busiest expert rank's tokens / the mean, as measured per rank (1.0: force-balanced benchmarks); "
        "multiplies what `imbalance` gives: state one of the two"))
    imbalance: float = Field(default=1.0, ge=1, le=1_000_000, description=(
        "busiest expert's routed tokens per micro-batch / the mean over the experts (1 + MaxVio of Wang et al. "
        "2024); 1.0: force-balanced, as NVIDIA's Megatron-Bridge MoE benchmarks run "
        "(moe_router_force_load_balancing). Measured dropless routing: about 1.5-1.7 with an auxiliary loss, "
        "1.04 with aux-loss-free expert bias (MaxVio_global, arXiv 2408.15664 Table 2); a batch's is above. "
        "Not priced with a capacity_factor (the capacity bounds it)"))
    # Routing (Megatron --moe-router-*; HF scoring_func, topk_method noaux_tc, n_group, topk_group,
    # routed_scaling_factor). Named for the exports only: the cost models do not read them.
    router_score: Literal["softmax", "sigmoid"] = Field(default="softmax", description=(
        "the router's score function (Megatron --moe-router-score-function; DeepSeek-V3, Kimi K2 and "
        "Llama 4: sigmoid); softmax: Megatron's default"))
    expert_bias: bool = Field(default=False, description=(
        "a per-expert bias added to the scores for choosing experts, updated to balance the load "
        "(DeepSeek-V3's aux-loss-free balancing, HF topk_method noaux_tc; Megatron --moe-router-enable-expert-bias)"))
    router_groups: int | None = Field(default=None, gt=0, le=1_000_000, description=(
        "experts split into this many groups for group-limited routing (HF n_group; Megatron "
        "--moe-router-num-groups); null: none"))
    router_group_top_k: int | None = Field(default=None, gt=0, le=1_000_000, description=(
        "groups each token may route to (HF topk_group; Megatron --moe-router-group-topk)"))
    top_k_scaling: float | None = Field(default=None, gt=0, le=1e6, description=(
        "factor on the routed experts' weights (HF routed_scaling_factor; Megatron "
        "--moe-router-topk-scaling-factor); null: 1"))

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoeSpec":
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must be at most experts ({self.experts})")
        if self.imbalance > self.experts / self.top_k:
            # an expert takes each token once: at most all T tokens, T top_k / E the mean
            raise ValueError(f"imbalance ({self.imbalance:g}) must be at most experts / top_k "
                             f"({self.experts / self.top_k:g}): the busiest expert takes each token at most once")
        if (self.router_groups is None) != (self.router_group_top_k is None):
            raise ValueError("router_groups and router_group_top_k go together (group-limited routing)")
        if self.router_groups is not None and (self.experts % self.router_groups or self.router_group_top_k > self.router_groups):
            raise ValueError(f"router_groups ({self.router_groups}) must divide experts ({self.experts}) and be at least "
                             f"router_group_top_k ({self.router_group_top_k})")
        return self

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn_hidden or self.expert_ffn_hidden

    def busiest_rank_load(self, ep) -> np.ndarray:
        """Routed tokens of the busiest expert-parallel rank / the mean rank's (arrays over ep): the
        rank holding the busiest expert, at `imbalance` x the mean expert's tokens, and n - 1 = E/ep - 1
        other experts sharing the remaining E - imbalance means evenly over E - 1 experts:
        (imbalance + (n - 1)(E - imbalance)/(E - 1)) / n. One expert a rank (ep = E): imbalance;
        every expert on each rank (ep = 1): 1, a rank's grouped GEMM takes all its tokens whatever
        their split. The least the stated busiest expert allows: a rank of several hot experts is
        busier (state it as load_imbalance). 1 with a capacity factor (drop and pad bound it)."""
        import numpy as np

        ep = np.asarray(ep, dtype=float)
        if self.capacity_factor is not None or self.imbalance == 1.0 or self.experts == 1:
            return np.ones_like(ep)
        e, f = float(self.experts), self.imbalance
        n = e / ep
        return (f + (n - 1.0) * (e - f) / (e - 1.0)) / n


class YarnSpec(Spec):
    """YaRN RoPE scaling as the model's config.json states it (HF rope_scaling type yarn; Peng et al. 2023).
    Named for the exports only: the cost models read rope_mscale, the factor it puts on cos and sin."""

    factor: float = Field(gt=0, le=1e6, description="context extension factor (HF factor)")
    original_max_position_embeddings: int = Field(gt=0, le=100_000_000, description="the pretraining context")
    beta_fast: float = Field(default=32, gt=0, le=1e6)
    beta_slow: float = Field(default=1, gt=0, le=1e6)
    mscale: float | None = Field(default=None, ge=0, le=1e6, description="HF mscale (DeepSeek-V3: 1.0)")
    mscale_all_dim: float | None = Field(default=None, ge=0, le=1e6, description="HF mscale_all_dim (DeepSeek-V3: 1.0)")


class MlaSpec(Spec):
    """Multi-head latent attention (DeepSeek-V2 Sec. 2.1, DeepSeek-V3): queries and keys/values
    projected down to low-rank latents and back up per head; a decoupled RoPE part."""

    q_lora_rank: int | None = Field(gt=0, le=1_000_000, description="query latent rank (null: no query compression)")
    kv_lora_rank: int = Field(gt=0, le=1_000_000)
    qk_nope_head_dim: int = Field(gt=0, le=100_000)
    qk_rope_head_dim: int = Field(gt=0, le=100_000)
    v_head_dim: int = Field(gt=0, le=100_000)


class ModelSpec(Spec):
    name: str = Field(min_length=1, max_length=128)
    layers: int = Field(gt=0, le=10_000)
    hidden: int = Field(gt=0, le=1_000_000)
    heads: int = Field(gt=0, le=100_000)
    kv_heads: int | None = Field(default=None, gt=0, le=100_000)
    head_dim: int | None = Field(default=None, gt=0, le=100_000, description="width of one head (default: hidden / heads)")
    ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000)
    ffn_act: Literal["gelu", "swiglu", "relu2"] = Field(default="gelu", description=(
        "MLP activation: gelu (up, down), swiglu (gate, up, down), relu2: squared ReLU (up, down; "
        "Nemotron-H, HF mlp_hidden_act relu2, Megatron --squared-relu)"))
    vocab: int = Field(gt=0, le=100_000_000)
    seq_len: int = Field(gt=0, le=100_000_000)
    tied_embeddings: bool = False
    position_embedding: Literal["learned", "rope", "none"] = "learned"  # none: no positions (Nemotron-H), no parameters
    sliding_window: int | None = Field(default=None, gt=0, le=100_000_000, description=(
        "sliding-window (local) attention: keys each query attends to, itself included (HF sliding_window; "
        "Megatron --window-size w-1,0); null: full causal attention on every layer"))
    full_attention_every: int | None = Field(default=None, ge=2, le=10_000, description=(
        "with sliding_window: every n-th layer keeps full attention, the others use the window (Megatron "
        "--window-attn-skip-freq, HF Gemma 3 sliding_window_pattern; GPT-OSS and Gemma 2: 2, Gemma 3: 6); "
        "null: every layer uses the window"))
    swiglu_limit: float | None = Field(default=None, gt=0, le=1e6, description=(
        "clamp of a SwiGLU's gate (above) and linear half (both sides) before the activation (HF "
        "swiglu_limit, Megatron --activation-func-clamp-value; GPT-OSS: 7.0); null: no clamp"))
    linear_bias: bool | None = Field(default=None, description=(
        "biases on every linear layer, the experts' too (Megatron's default add_bias_linear; GPT-OSS: "
        "true); false: none (Megatron --disable-bias-linear); null: not stated, as the parameter count "
        "has them (QKV and output biases, GeLU MLPs with biases, SwiGLU MLPs and experts without)"))
    normalization: Literal["layernorm", "rmsnorm"] | None = Field(default=None, description=(
        "the layers' norm (Megatron --normalization; Llama-style models: rmsnorm); null: not stated, "
        "Megatron's default LayerNorm. The parameter count keeps LayerNorm's 4h per layer either way "
        "(RMSNorm's 2h: under 0.01 % of a layer)"))
    rope_theta: float | None = Field(default=None, ge=1, le=1e12, description=(
        "RoPE base (HF rope_theta, Megatron --rotary-base); null: 10,000 (Megatron's default); only names "
        "the model for the exports, the cost models do not read it"))
    rope_scaling_factor: float | None = Field(default=None, gt=1, le=1e6, description=(
        "Llama 3.1's RoPE frequency scaling (HF rope_scaling rope_type llama3, Megatron --use-rope-scaling "
        "--rope-scaling-factor): 8; null: none"))
    qk_norm: bool = Field(default=False, description=(
        "a norm on each head's queries and keys (Qwen3, OLMo 2; Megatron --qk-layernorm)"))
    rope_mscale: float = Field(default=1.0, gt=0, le=100, description=(
        "factor YaRN puts on RoPE's cos and sin (GPT-OSS: 0.1 ln 32 + 1 = 1.347; DeepSeek-V3: 1, its "
        "mscale and mscale_all_dim cancel); Megatron's fused RoPE takes only 1"))
    yarn: YarnSpec | None = Field(default=None, description=(
        "YaRN RoPE scaling (HF rope_scaling type yarn), for the exports; null: none"))
    mtp_layers: int = Field(default=0, ge=0, le=100, description=(
        "multi-token-prediction modules after the last layer (HF num_nextn_predict_layers, Megatron "
        "--mtp-num-layers; DeepSeek-V3: 1); named for the exports, not priced"))
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    layer_pattern: str | None = Field(default=None, min_length=1, max_length=10_000, description=(
        "hybrid model: one character a layer, M Mamba-2, D gated DeltaNet, * attention, - MLP (MoE with a "
        "moe: section), as Nemotron-H's hybrid_override_pattern (Megatron --hybrid-layer-pattern, which "
        "writes DeltaNet G and MoE E); its length is layers (planner/specs/hybrid.py)"))
    mamba: MambaSpec | None = Field(default=None, description="the Mamba-2 layers (M) of a layer_pattern")
    deltanet: DeltaNetSpec | None = Field(default=None, description="the gated DeltaNet layers (D) of a layer_pattern")
    attention_output_gate: bool = Field(default=False, description=(
        "a sigmoid gate on the attention output, projected with the queries (Qwen3-Next; Megatron "
        "--attention-output-gate): the query projection twice as wide"))
    training: TrainingSpec

    @field_validator("rope_theta", mode="before")
    @classmethod
    def _rope_base_above_one(cls, v):
        # RoPE's frequencies are base^(-2i/d): a base below 1 inverts the scale; Megatron's --rotary-base is
        # an integer, so 0.5 was written as 0 (issue 38). Before the field's ge=1, for a message that says so.
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 1:
            raise ValueError(f"rope_theta ({v:g}) is a RoPE base (HF rope_theta, Megatron --rotary-base): expected at "
                             "least 1 (10,000 for Llama 2, 500,000 for Llama 3)")
        return v

    @model_validator(mode="after")
    def _shapes_divide(self) -> "ModelSpec":
        if self.head_dim is None and self.mla is None and self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden}), or give head_dim")
        if self.moe is not None and self.moe.dense_layers > self.layers:
            raise ValueError(f"moe.dense_layers ({self.moe.dense_layers}) is more than the {self.layers} layers")
        if self.num_kv_heads > self.heads or self.heads % self.num_kv_heads:
            raise ValueError(f"kv_heads ({self.num_kv_heads}) must divide heads ({self.heads})")
        if self.full_attention_every is not None and self.sliding_window is None:
            raise ValueError("full_attention_every needs sliding_window (the window of the other layers)")
        if self.full_attention_every is not None and self.full_attention_every > self.layers:
            raise ValueError(f"full_attention_every ({self.full_attention_every}) is more than the {self.layers} "
                             "layers: no layer would keep full attention (leave it out to window every layer)")
        wrong = pattern_error(self)
        if wrong:
            raise ValueError(wrong)
        if self.attention_output_gate and self.layer_pattern is None:
            raise ValueError("attention_output_gate is priced for hybrid models (a layer_pattern) only")
        t = self.training
        if self.moe is None:
            given = [k for k, on in (("moe_dispatcher", t.moe_dispatcher != "alltoall"), ("moe_a2a_overlap", t.moe_a2a_overlap),
                                     ("te_op_fuser", t.te_op_fuser)) if on]
            if given:
                raise ValueError(f"training.{', training.'.join(given)} need a moe: section (a MoE model)")
            if self.swiglu_limit is not None:
                raise ValueError("swiglu_limit needs a moe: section: Megatron clamps the GLU of expert MLPs only")
        if self.swiglu_limit is not None and self.ffn_act != "swiglu":
            raise ValueError(f"swiglu_limit clamps a SwiGLU; ffn_act is {self.ffn_act}")
        return self

    @property
    def tp_split_heads(self) -> tuple:
        """(name, count) of a hybrid model's mixer heads tp splits, beyond the attention heads."""
        out = []
        if self.mamba is not None:
            out += [("mamba.heads", self.mamba.heads), ("mamba.groups", self.mamba.groups)]
        if self.deltanet is not None:
            out += [("deltanet.key_heads", self.deltanet.key_heads), ("deltanet.value_heads", self.deltanet.value_heads)]
        return tuple(out)

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads * head_dim."""
        return self.num_kv_heads * self.head_width

    @property
    def moe_layers(self) -> int:
        """MoE layers: after the first `dense_layers`, every `layer_every`-th (Megatron --moe-layer-freq)."""
        if self.moe is not None and self.layer_pattern is not None:
            return self.layer_pattern.count(MLP)
        return 0 if self.moe is None else (self.layers - self.moe.dense_layers) // self.moe.layer_every

    def moe_layers_before(self, n):
        """MoE layers among the first n (n an int or an array): layer i >= k is MoE when
        (i - k + 1) % layer_every == 0 (Llama 4 Maverick: every second layer)."""
        import numpy as np

        if self.moe is None:
            return np.zeros_like(np.asarray(n))
        if self.layer_pattern is not None:
            return pattern_layers_before(self, MLP, n)
        return np.maximum(np.asarray(n) - self.moe.dense_layers, 0) // self.moe.layer_every

    def layer_params(self) -> int:
        """Parameters of one dense transformer layer, biases and layer norms included (planner/specs/layers.py)."""
        return LayerKind("dense", 1, attention_matrices(self) + mlp_matrices(self, self.ffn), norm_params=layer_norm_params(self)).params

    def embedding_params(self) -> int:
        pos = self.seq_len * self.hidden if self.position_embedding == "learned" else 0
        return self.vocab * self.hidden + pos

    def output_params(self) -> int:
        """Output projection (logits) weights; zero when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def total_params(self) -> int:
        layers = sum(k.count * k.params for k in layer_kinds(self))
        return layers + self.embedding_params() + self.output_params() + 2 * self.hidden

    def active_params(self) -> int:
        """Parameters one token passes through (top_k routed experts of each MoE layer)."""
        layers = sum(k.count * k.active_params for k in layer_kinds(self))
        return layers + self.embedding_params() + self.output_params() + 2 * self.hidden
