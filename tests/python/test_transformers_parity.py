"""Today's architectures from transformers (small configs, random weights, nothing downloaded) through both front
doors, `onnxtrain.Module` (capturing through torch.export, and through the TorchScript-based fallback) and
`torch.compile(backend="onnxtrain")`, against eager: the loss and the logits, every
parameter gradient (relative to the gradient's scale) and the losses of 10 AdamW steps. Between them they bring
grouped-query attention, sliding windows, padding masks, rotary embeddings, RMSNorm, SwiGLU, tied embeddings and an
encoder-decoder with cross-attention; GPT-2 and BERT stand for the older families."""

import copy
import warnings

import pytest
import torch

import onnxtrain
from parity import assert_trains_as_eager

transformers = pytest.importorskip("transformers")
T = transformers
VOCAB = 100


def decoder(model, config, **kw):
    """A causal LM with 4 query heads sharing 2 key-value heads."""
    return lambda: model(config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                use_cache=False, **kw))


MODELS = {
    "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)),
    "bert": lambda: T.BertForMaskedLM(T.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                   num_attention_heads=4, intermediate_size=64,
                                                   max_position_embeddings=32, hidden_dropout_prob=0.0,
                                                   attention_probs_dropout_prob=0.0)),
    "llama": decoder(T.LlamaForCausalLM, T.LlamaConfig),
    "qwen2": decoder(T.Qwen2ForCausalLM, T.Qwen2Config),
    "mistral": decoder(T.MistralForCausalLM, T.MistralConfig, sliding_window=4),  # shorter than the sequence
    "phi3": decoder(T.Phi3ForCausalLM, T.Phi3Config, pad_token_id=0, eos_token_id=1, bos_token_id=1),
    "gemma": decoder(T.GemmaForCausalLM, T.GemmaConfig, head_dim=8),  # embeddings tied to the output
    "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                          num_heads=4, dropout_rate=0.0, use_cache=False,
                                                          decoder_start_token_id=0)),
    "distilbert": lambda: T.DistilBertForMaskedLM(T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4,
                                                                     hidden_dim=64, max_position_embeddings=32,
                                                                     dropout=0.0, attention_dropout=0.0)),
    "roberta": lambda: T.RobertaForMaskedLM(T.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                            num_attention_heads=4, intermediate_size=64,
                                                            max_position_embeddings=40, hidden_dropout_prob=0.0,
                                                            attention_probs_dropout_prob=0.0)),
}


def batch():
    ids = torch.randint(1, VOCAB, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, -2:] = 0  # two padding tokens
    return dict(input_ids=ids, attention_mask=mask, labels=ids)


def exporter_of(door):
    return "torchscript" if door == "module-torchscript" else "auto"


def wrap(model, door):
    """`onnxtrain.Module` capturing through torch.export ("module") or the TorchScript-based exporter, or
    torch.compile's backend."""
    if door == "compile":
        return torch.compile(model, backend="onnxtrain")
    return onnxtrain.Module(model, onnxtrain.Options(exporter=exporter_of(door)))


@pytest.fixture(autouse=True)
def _exporter_from_options(monkeypatch):
    monkeypatch.delenv("ONNXTRAIN_EXPORTER", raising=False)  # (the environment would override the options)


@pytest.mark.parametrize("door", ["module", "module-torchscript", "compile"])
@pytest.mark.parametrize("name", list(MODELS))
def test_transformers_model_trains_as_eager(name, door):
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    eager = MODELS[name]().train()
    ours = copy.deepcopy(eager)
    wrapped = wrap(ours, door)
    losses = assert_trains_as_eager(eager, ours, wrapped, batch(), steps=10)
    assert losses[-1] < losses[0]
    if door != "compile":
        assert wrapped.export_count == 1
        expected = "torchscript" if door == "module-torchscript" else "torch.export"
        assert wrapped.runners()[0].exported.exporter == expected


def seq2seq(model, config):
    """An encoder-decoder of BART's kind, its decoder inputs the labels shifted right."""
    return lambda: model(config(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                decoder_ffn_dim=64, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
                                activation_dropout=0.0, use_cache=False))


MORE = {  # more families, through onnxtrain.Module: among them those whose ops the direct capture learned last
    "qwen3": decoder(T.Qwen3ForCausalLM, T.Qwen3Config, head_dim=8),  # RMSNorm on queries and keys
    "gemma2": decoder(T.Gemma2ForCausalLM, T.Gemma2Config, head_dim=8, sliding_window=4),  # logit soft-capping
    "olmo2": decoder(T.Olmo2ForCausalLM, T.Olmo2Config),
    "phi": decoder(T.PhiForCausalLM, T.PhiConfig),  # partial rotary, parallel attention and MLP
    "gpt_neox": lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                                             num_hidden_layers=2, num_attention_heads=4,
                                                             max_position_embeddings=32, use_cache=False)),
    "opt": lambda: T.OPTForCausalLM(T.OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                                num_attention_heads=4, max_position_embeddings=32,
                                                word_embed_proj_dim=32, dropout=0.0, use_cache=False)),
    "bloom": lambda: T.BloomForCausalLM(T.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4,
                                                      hidden_dropout=0.0, attention_dropout=0.0, use_cache=False)),
    "gptj": lambda: T.GPTJForCausalLM(T.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                                                   n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                                   use_cache=False)),
    "falcon": lambda: T.FalconForCausalLM(T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                         num_attention_heads=4, hidden_dropout=0.0,
                                                         attention_dropout=0.0, use_cache=False)),
    "mixtral": decoder(T.MixtralForCausalLM, T.MixtralConfig, num_local_experts=4, num_experts_per_tok=2),
    "bart": seq2seq(T.BartForConditionalGeneration, T.BartConfig),
    "mbart": seq2seq(T.MBartForConditionalGeneration, T.MBartConfig),
    "pegasus": seq2seq(T.PegasusForConditionalGeneration, T.PegasusConfig),
    "modernbert": lambda: T.ModernBertForMaskedLM(T.ModernBertConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=32, pad_token_id=0, eos_token_id=1, bos_token_id=2, cls_token_id=3, sep_token_id=4)),
}


@pytest.mark.parametrize("name", list(MORE))
def test_more_families_are_translated_directly_and_train_as_eager(name):
    """Loss, logits, every gradient and 3 AdamW steps as eager's, through the direct capture: Bloom's ALiBi (pow
    of two tensors, baddbmm; its GELU a custom autograd Function in training), GPT-J's rotary
    (repeat_interleave, stack), Falcon's weight.T, Mixtral's routing weights divided in place, ModernBERT's unbind,
    BART's, mBART's and Pegasus's decoder inputs written into slices (Pegasus's starting at the padding token)
    among them (PyTorch's exporter, the fallback, takes tens of seconds at real size)."""
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    eager = MORE[name]().train()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours)
    losses = assert_trains_as_eager(eager, ours, wrapped, batch(), steps=3)
    assert losses[-1] < losses[0]
    assert wrapped.runners()[0].exported.model.producer_name == "onnxtrain"
