# ruff: noqa: E501
r"""Chat templates of each model family, written for the tests from the families' documented formats.

They follow the public formats and the behaviours that matter to token exactness (roles,
turn ends, where tools and reasoning go, the checks that raise), not the exact prose of the
models' own templates:

* ``LLAMA31``: Llama 3.1 JSON tool calling. System header with the knowledge-cutoff lines,
  tools in the first user message, one call per assistant message (raises otherwise) as
  ``{"name": ..., "parameters": ...}``, tool results as ``ipython`` turns (content through
  ``tojson`` when it is iterable, strings included, as the original does), ``<|eot_id|>``.
* ``PYTHONIC``: Llama 3.2's pythonic tool calling: tools in the system turn, calls as
  ``[name(key=value)]``, results as ``ipython`` turns.
* ``MISTRAL``: Mistral's v3 instruct format: strict user/assistant alternation (tool turns
  aside; raises otherwise), ``[AVAILABLE_TOOLS]`` before the last user message, the system
  prompt joined to the last user message, ``[TOOL_CALLS] [...]`` with 9-character ids
  (raises otherwise), ``[TOOL_RESULTS]{"content": ..., "call_id": ...}[/TOOL_RESULTS]``, no
  generation prompt, ``</s>`` ends assistant turns.
* ``HARMONY``: gpt-oss. System and developer messages (tools as a TypeScript namespace),
  ``<|channel|>`` tags refused in ``content``, tool calls as
  ``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>...<|call|>``,
  results authored ``functions.NAME`` (raises without a previous call), earlier analysis
  dropped, ``<|return|>`` only for a final last message without a generation prompt.
* ``DEEPSEEK_V3``: DeepSeek-V3's ``<｜User｜>``/``<｜Assistant｜>`` format, calls between
  ``<｜tool▁calls▁begin｜>`` markers with their ``arguments`` concatenated as a string, tool
  outputs between ``<｜tool▁outputs▁begin｜>`` markers, no generation prompt after tool output,
  earlier ``</think>`` reasoning dropped.
* ``QWEN3_CODER``: ChatML with ``<function=NAME><parameter=KEY>`` calls and
  ``<tool_response>`` results grouped in a ``user`` turn.
* ``GEMMA3``: Gemma 3: system text joined to the first user turn, strict alternation (raises
  "Conversation roles must alternate user/assistant/user/assistant/..."), ``model`` role.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

LLAMA31 = r"""
{{- bos_token }}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}{{- "Environment: ipython\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: 26 Jul 2024\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools is not none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

PYTHONIC = r"""
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools %}
    {{- "You are an expert in composing functions. Given a question and a set of possible functions, make one or "
        "more function calls. Put them in the format [func_name1(params_name1=params_value1, "
        "params_name2=params_value2...), func_name2(params)]\nHere is a list of functions in JSON format:\n" }}
    {%- for t in tools %}{{- t | tojson }}{{- "\n" }}{%- endfor %}
    {{- "\n" }}
{%- endif %}
{{- system_message }}{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role == 'tool' or message.role == 'ipython' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" + message.content + "<|eot_id|>" }}
    {%- elif message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n[' }}
        {%- for tc in message.tool_calls %}
            {%- if not loop.first %}{{- ", " }}{%- endif %}
            {{- tc.function.name + "(" }}
            {%- for key, value in tc.function.arguments.items() %}
                {%- if not loop.first %}{{- ", " }}{%- endif %}
                {{- key + "=" + (value | tojson) }}
            {%- endfor %}
            {{- ")" }}
        {%- endfor %}
        {{- "]<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}
"""

MISTRAL = r"""
{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}
{%- set ns = namespace(index=0) %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {{- '{"type": "function", "function": ' + (tool.function | tojson) + '}' }}
                {%- if not loop.last %}{{- ", " }}{%- endif %}
            {%- endfor %}
            {{- "][/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function | tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id | length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}{{- ", " }}{%- else %}{{- "]" + eos_token }}{%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"] | trim + eos_token }}
    {%- elif message["role"] == "tool" %}
        {{- '[TOOL_RESULTS] {"content": ' + message.content | tojson + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id | length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

HARMONY = r"""
{%- macro render_tools(tools) -%}
    {{- "# Tools\n\n## functions\n\nnamespace functions {\n\n" }}
    {%- for tool in tools %}
        {%- set f = tool.function if tool.function is defined else tool %}
        {{- "// " + (f.description or "") + "\n" }}
        {{- "type " + f.name + " = (_: " }}
        {%- if f.parameters and f.parameters.properties %}
            {{- "{\n" }}
            {%- for name, spec in f.parameters.properties.items() %}
                {%- if spec.description %}{{- "// " + spec.description + "\n" }}{%- endif %}
                {{- name }}
                {%- if not (f.parameters.required and name in f.parameters.required) %}{{- "?" }}{%- endif %}
                {{- ": " + (spec.type if spec.type is string else "any") + ",\n" }}
            {%- endfor %}
            {{- "}) => any;\n\n" }}
        {%- else %}
            {{- "{}) => any;\n\n" }}
        {%- endif %}
    {%- endfor %}
    {{- "} // namespace functions" }}
{%- endmacro -%}
{{- "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n" }}
{{- "Current date: 2025-06-28\n\nReasoning: " + (reasoning_effort if reasoning_effort is defined else "medium") + "\n\n" }}
{{- "# Valid channels: analysis, commentary, final. Channel must be included for every message." }}
{%- if tools %}{{- "\nCalls to these tools must go to the commentary channel: 'functions'." }}{%- endif %}
{{- "<|end|>" }}
{%- if messages[0].role == "developer" or messages[0].role == "system" %}
    {%- set developer_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set developer_message = "" %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if developer_message or tools %}
    {{- "<|start|>developer<|message|>" }}
    {%- if developer_message %}{{- "# Instructions\n\n" + developer_message + "\n\n" }}{%- endif %}
    {%- if tools %}{{- render_tools(tools) }}{%- endif %}
    {{- "<|end|>" }}
{%- endif %}
{%- set last_tool_call = namespace(name=none) %}
{%- for message in loop_messages -%}
    {%- if message.role == 'assistant' -%}
        {%- if message.content and ("<|channel|>analysis<|message|>" in message.content or "<|channel|>final<|message|>" in message.content) %}
            {{- raise_exception("You have passed a message containing <|channel|> tags in the content field. Instead of doing this, you should pass analysis messages (the string between '<|message|>' and '<|end|>') in the 'thinking' field, and final messages (the string between '<|message|>' and '<|end|>') in the 'content' field.") }}
        {%- endif %}
        {%- if "tool_calls" in message %}
            {%- set future_final = namespace(found=false) %}
            {%- for later in loop_messages[loop.index:] %}
                {%- if later.role == 'assistant' and "tool_calls" not in later %}{%- set future_final.found = true %}{%- endif %}
            {%- endfor %}
            {%- set tool_call = message.tool_calls[0] %}
            {%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
            {%- if message.content and message.thinking %}
                {{- raise_exception("Cannot pass both content and thinking in an assistant message with tool calls! Put the analysis message in one or the other, but not both.") }}
            {%- elif message.content and not future_final.found %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.content + "<|end|>" }}
            {%- elif message.thinking and not future_final.found %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}
            {%- endif %}
            {{- "<|start|>assistant to=functions." + tool_call.name + "<|channel|>commentary json<|message|>" }}
            {%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
            {{- "<|call|>" }}
            {%- set last_tool_call.name = tool_call.name %}
        {%- elif loop.last and not add_generation_prompt %}
            {%- if message.thinking %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}
            {%- endif %}
            {{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|return|>" }}
        {%- else %}
            {{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>" }}
            {%- set last_tool_call.name = none %}
        {%- endif %}
    {%- elif message.role == 'tool' -%}
        {%- if last_tool_call.name is none %}
            {{- raise_exception("Message has tool role, but there was no previous assistant message with a tool call!") }}
        {%- endif %}
        {{- "<|start|>functions." + last_tool_call.name }}
        {{- " to=assistant<|channel|>commentary<|message|>" + message.content | tojson + "<|end|>" }}
    {%- else -%}
        {{- "<|start|>user<|message|>" + message.content + "<|end|>" }}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}
"""

DEEPSEEK_V3 = r"""
{%- if not add_generation_prompt is defined %}{%- set add_generation_prompt = false %}{%- endif %}
{%- set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}{%- set ns.system_prompt = message['content'] %}{%- endif %}
{%- endfor %}
{{- bos_token }}{{- ns.system_prompt }}
{%- if tools %}
    {{- "\n\n## Tools\nYou have access to the following tools:\n" }}
    {%- for tool in tools %}{{- "\n### " + tool.function.name + "\nDescription: " + (tool.function.description or "") + "\n\nParameters: " + (tool.function.parameters | tojson) + "\n" }}{%- endfor %}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] == 'user' %}
        {%- set ns.is_tool = false %}
        {{- '<｜User｜>' + message['content'] }}
    {%- elif message['role'] == 'assistant' and 'tool_calls' in message %}
        {%- set ns.is_tool = false %}
        {%- for tool in message['tool_calls'] %}
            {%- if not ns.is_first %}
                {{- '<｜Assistant｜>' + (message['content'] or '') + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n```json\n' + tool['function']['arguments'] + '\n```<｜tool▁call▁end｜>' }}
                {%- set ns.is_first = true %}
            {%- else %}
                {{- '\n<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n```json\n' + tool['function']['arguments'] + '\n```<｜tool▁call▁end｜>' }}
            {%- endif %}
        {%- endfor %}
        {{- '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' }}
    {%- elif message['role'] == 'assistant' %}
        {%- set content = message['content'] %}
        {%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}
        {%- if ns.is_tool %}
            {{- '<｜tool▁outputs▁end｜>' + content + '<｜end▁of▁sentence｜>' }}
            {%- set ns.is_tool = false %}
        {%- else %}
            {{- '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}
        {%- endif %}
    {%- elif message['role'] == 'tool' %}
        {%- set ns.is_tool = true %}
        {%- if ns.is_output_first %}
            {{- '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}
            {%- set ns.is_output_first = false %}
        {%- else %}
            {{- '\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- endif %}
{%- if add_generation_prompt and not ns.is_tool %}{{- '<｜Assistant｜>' }}{%- endif %}
"""

QWEN3_CODER = r"""
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if system_message or tools %}
    {{- "<|im_start|>system\n" + system_message }}
    {%- if tools %}
        {{- "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
        {%- for tool in tools %}
            {%- set f = tool.function %}
            {{- "\n<function>\n<name>" + f.name + "</name>\n<description>" + (f.description or "") + "</description>\n<parameters>" }}
            {%- for name, spec in (f.parameters.properties or {}).items() %}
                {{- "\n<parameter>\n<name>" + name + "</name>\n<type>" + (spec.type or "string") + "</type>\n</parameter>" }}
            {%- endfor %}
            {{- "\n</parameters>\n</function>" }}
        {%- endfor %}
        {{- "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>" }}
    {%- endif %}
    {{- "<|im_end|>\n" }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message.role == "assistant" and message.tool_calls %}
        {{- "<|im_start|>assistant\n" + (message.content or "") }}
        {%- for tc in message.tool_calls %}
            {%- set tc = tc.function if tc.function is defined else tc %}
            {{- "\n\n<tool_call>\n<function=" + tc.name + ">\n" }}
            {%- for key, value in tc.arguments.items() %}
                {{- "<parameter=" + key + ">\n" }}
                {%- if value is string %}{{- value }}{%- else %}{{- value | tojson }}{%- endif %}
                {{- "\n</parameter>\n" }}
            {%- endfor %}
            {{- "</function>\n</tool_call>" }}
        {%- endfor %}
        {{- "<|im_end|>\n" }}
    {%- elif message.role == "user" or message.role == "assistant" %}
        {{- "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n" }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or loop_messages[loop.index0 - 1].role != "tool" %}{{- "<|im_start|>user\n" }}{%- endif %}
        {{- "<tool_response>\n" + message.content + "\n</tool_response>\n" }}
        {%- if loop.last or loop_messages[loop.index0 + 1].role != "tool" %}{{- "<|im_end|>\n" }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- "<|im_start|>assistant\n" }}{%- endif %}
"""

GEMMA3 = r"""
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set first_user_prefix = "" %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif %}
    {%- set role = "model" if message['role'] == 'assistant' else message['role'] %}
    {{- '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") + message['content'] | trim + '<end_of_turn>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>model\n' }}{%- endif %}
"""

#: family -> (template, special tokens added to the tokenizer, eos token, bos token)
FAMILY_SPECS: dict[str, tuple[str, tuple[str, ...], str, str | None]] = {
    "llama3_json": (LLAMA31, ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                              "<|eom_id|>", "<|python_tag|>"), "<|eot_id|>", "<|begin_of_text|>"),
    "pythonic": (PYTHONIC, ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                            "<|eom_id|>", "<|python_tag|>"), "<|eot_id|>", "<|begin_of_text|>"),
    "mistral": (MISTRAL, ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                          "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"), "</s>", "<s>"),
    "openai": (HARMONY, ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
                         "<|call|>"), "<|return|>", None),
    "deepseek_v3": (DEEPSEEK_V3, ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                  "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                  "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
                                  "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁sep｜>"),
                    "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>"),
    "qwen3_coder": (QWEN3_CODER, (), "<|im_end|>", None),
    "gemma3": (GEMMA3, ("<bos>", "<start_of_turn>", "<end_of_turn>"), "<end_of_turn>", "<bos>"),
}


@cache
def _base_tokenizer() -> Any:
    from agent_gym.models import load_qwen_tokenizer

    return load_qwen_tokenizer()


@cache
def family_tokenizer(family: str) -> Any:
    """The real Qwen BPE with the family's role markers added as special tokens and its template."""
    template, specials, eos, bos = FAMILY_SPECS[family]
    tokenizer = copy.deepcopy(_base_tokenizer())
    if specials:
        tokenizer.add_special_tokens({"additional_special_tokens": list(specials)})
    tokenizer.eos_token = eos
    if bos is not None:
        tokenizer.bos_token = bos
    tokenizer.chat_template = template
    return tokenizer


#: family -> the name of the model's own chat template that the ``trl`` package ships (chat_templates/NAME.jinja)
REAL_TEMPLATES: dict[str, str] = {
    "openai": "gptoss",  # gpt-oss
    "llama3_json": "llama3_1",  # Llama 3.1 (Llama 3.2's template writes the same JSON calls)
    "deepseek_v3": "deepseekv3",
    "gemma3": "gemma3",
}


def real_template(name: str) -> str | None:
    """The source of a model's own chat template shipped by ``trl`` (None when trl is not installed)."""
    try:
        from importlib.resources import files

        return (files("trl") / "chat_templates" / f"{name}.jinja").read_text(encoding="utf-8")
    except (ImportError, FileNotFoundError, ModuleNotFoundError):
        return None


@cache
def real_family_tokenizer(family: str, name: str | None = None) -> Any:
    """The family's tokenizer (its role markers as special tokens) with the model's own template from ``trl``."""
    template = real_template(name or REAL_TEMPLATES[family])
    if template is None:
        return None
    tokenizer = copy.deepcopy(family_tokenizer(family))
    tokenizer.chat_template = template
    return tokenizer
