"""A tiny Qwen2-style chat model built offline, for tests and laptops.

`build_tiny_model` writes a randomly initialised ~3.5M-parameter Qwen2 causal LM
and a byte-level BPE tokenizer (trained here, on generated text) with a ChatML
chat template that renders tools the way Qwen2.5 / Hermes models expect. It
needs no network and takes about a second.

Determinism: the tokenizer does not depend on the seed (its training text is
fixed), so every tiny model shares one vocabulary; the seed only picks the
weights. The same seed gives byte-identical files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

from swarmrl_server.models._atomic import build_once

if TYPE_CHECKING:  # transformers is imported lazily: importing it takes ~2 s
    from transformers import PreTrainedTokenizerFast

ENDOFTEXT, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
VOCAB_SIZE = 2048
_CORPUS_SEED = 1234  # fixed: the tokenizer must not change with the weights' seed

# Qwen2.5-style ChatML with Hermes tool calling. Differences from Qwen2.5: no default
# system prompt, content may be a list of text parts, and tool-call arguments that
# are already a JSON string (OpenAI wire format) are inserted as is, not re-encoded.
CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
{%- if content is string -%}{{- content -}}
{%- elif content is none -%}
{%- else -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- '\n' }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) or (message.role == 'assistant' and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + render_content(message.content) + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant' }}
        {%- set content = render_content(message.content) %}
        {%- if content %}
            {{- '\n' + content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + render_content(message.content) + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


def _words(text: str) -> list[str]:
    """Splits a space-separated word list (easier to read and edit than a list literal)."""
    return text.split()


_COLORS = _words("red orange yellow green blue purple pink brown black white gray gold silver")
_FRUITS = _words(
    "apple banana cherry grape lemon lime mango orange peach pear plum melon "
    "strawberry watermelon kiwi"
)
_ANIMALS = _words(
    "cat dog horse cow pig sheep goat lion tiger bear wolf fox rabbit mouse bird fish "
    "duck owl frog snake"
)
_NUMBERS = _words(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty "
    "sixty seventy eighty ninety hundred thousand million"
)
_WORDS = _words(
    "the a an and or but if then else of to in on at by for with from as is are was "
    "were be been has have had do does did not no yes this that these those it its he "
    "she they we you i me my your our their what which who when where why how all any "
    "some many much more most few one two first last next new old good bad big small "
    "long short high low left right up down time day year way thing man woman child "
    "world life hand part place case week company number group problem fact water city "
    "name word answer question game score reward task step call result value list count "
    "say get make go know take see come think look want give use find tell ask work seem "
    "feel try leave put mean keep let begin help show hear play run move live believe "
    "hold bring write sit stand lose pay meet include continue set learn change lead "
    "understand watch follow stop create speak read spend grow open walk win offer "
    "remember love consider appear buy wait serve die send expect build stay fall cut "
    "reach kill remain suggest raise pass sell require report decide pull color fruit "
    "animal capital country weather today tomorrow sunny rainy cold warm hot please "
    "thank thanks hello sure okay correct wrong true false null system user assistant "
    "tool tools function functions arguments name type properties string object integer "
    "parameters description required json call response provided signatures within XML "
    "tags return format query brief"
)
_CITIES = _words("Paris London Tokyo Berlin Rome Madrid Cairo Lima Oslo Seoul Delhi")
_TOOLS = _words("get_weather search calculator lookup add multiply read_file send_email")
_PUNCT = [".", ",", "!", "?", ":", ";", " -", "..."]
_ONSETS = _words("b c d f g h j k l m n p r s t v w z st tr pl gr br ch sh th qu")
_VOWELS = _words("a e i o u ai ea ee oo ou")
_CODAS = ["", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "rt"]


def _made_up_word(rng: random.Random) -> str:
    """An English-looking word of 1-3 syllables (fills the vocab with plausible merges)."""
    return "".join(
        rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
        for _ in range(rng.randint(1, 3))
    )


def _sentence(rng: random.Random) -> str:
    pools = [_WORDS] * 6 + [_COLORS, _FRUITS, _ANIMALS, _NUMBERS, _CITIES]
    words = [
        _made_up_word(rng) if rng.random() < 0.25 else rng.choice(rng.choice(pools))
        for _ in range(rng.randint(3, 14))
    ]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 2000)))
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice(_PUNCT)


def _json_text(rng: random.Random) -> str:
    args = {
        rng.choice(["city", "query", "x", "y", "path", "n", "color"]): rng.choice(
            [rng.choice(_CITIES), rng.randint(0, 999), rng.choice(_COLORS), _sentence(rng)]
        )
    }
    call = {"name": rng.choice(_TOOLS), "arguments": args}
    if rng.random() < 0.5:
        return f"{TOOL_CALL_OPEN}\n{json.dumps(call)}\n{TOOL_CALL_CLOSE}"
    return json.dumps({"result": rng.choice([_sentence(rng), rng.randint(-50, 5000)])})


def _corpus(n_docs: int = 4000) -> list[str]:
    """Deterministic training text: sentences, chat-ish turns, JSON and numbers."""
    rng = random.Random(_CORPUS_SEED)
    docs: list[str] = []
    for i in range(n_docs):
        kind = i % 5
        if kind == 0:
            docs.append(" ".join(_sentence(rng) for _ in range(rng.randint(1, 5))))
        elif kind == 1:
            docs.append(f"user\n{_sentence(rng)}\nassistant\n{_sentence(rng)}\n")
        elif kind == 2:
            docs.append(_json_text(rng))
        elif kind == 3:
            docs.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(8)))
        else:
            docs.append(f"<tool_response>\n{_json_text(rng)}\n</tool_response> <tools>\n")
    # Every list word spelled alone and after a space, so each becomes one or two tokens.
    for word in _COLORS + _FRUITS + _ANIMALS + _NUMBERS + _WORDS + _CITIES + _TOOLS:
        docs.extend([word, f" {word}", f" {word.capitalize()}"] * 20)
    return docs


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny models' tokenizer: byte-level BPE with ChatML and tool-call tokens."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    # Exactly Qwen2's pipeline (NFC, its split regex, byte-level): AutoTokenizer loads a
    # qwen2 model's tokenizer as Qwen2Tokenizer, which rebuilds this pipeline around the
    # saved vocab and merges, so any other choice would tokenize differently on reload.
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 2,
        special_tokens=[ENDOFTEXT, IM_START, IM_END, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    # Not special (as in Qwen2.5): decoding with skip_special_tokens keeps them, so a
    # tool-call parser sees them in the completion text.
    tok.add_tokens(
        [
            AddedToken(TOOL_CALL_OPEN, special=False, normalized=False),
            AddedToken(TOOL_CALL_CLOSE, special=False, normalized=False),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )


def _token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(found, int), token  # one token in, one id out
    return found


def build_tiny_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Builds (once) a tiny random Qwen2 chat model with its tokenizer into `out_dir`.

    Returns `out_dir`, loadable with `AutoModelForCausalLM/AutoTokenizer.from_pretrained`.
    A complete earlier build in `out_dir` is reused as is.
    """

    def build(tmp_dir: Path) -> None:
        import torch
        from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

        tokenizer = build_tokenizer()
        im_end, pad = (_token_id(tokenizer, t) for t in (IM_END, PAD))
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=256,
            intermediate_size=768,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            bos_token_id=None,
            eos_token_id=im_end,
            pad_token_id=pad,
        )
        # fork_rng: seed the init without disturbing the caller's global RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen2ForCausalLM(config)
        model.generation_config = GenerationConfig(
            eos_token_id=im_end, pad_token_id=pad, bos_token_id=None
        )
        model.save_pretrained(tmp_dir, safe_serialization=True)
        tokenizer.save_pretrained(tmp_dir)

    return build_once(out_dir, build, marker_text=f"tiny seed={seed}\n")
