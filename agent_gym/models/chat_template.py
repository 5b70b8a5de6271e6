r"""Chat templates written for agent_gym's offline tokenizers.

``QWEN_CHAT_TEMPLATE`` is a ChatML template in the style of Qwen3:

* ``system``/``user``/``assistant`` turns are ``<|im_start|>ROLE\\n...<|im_end|>\\n``;
* tools (OpenAI function schemas) are listed as JSON lines inside ``<tools></tools>``
  in the system turn, followed by instructions to answer with
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``;
* assistant ``tool_calls`` (OpenAI format) are rendered as ``<tool_call>`` JSON blocks;
* ``tool`` messages become ``<tool_response>`` blocks inside a ``user`` turn (consecutive
  tool messages share one turn);
* ``<think>`` reasoning (in ``reasoning_content`` or inline in ``content``) is kept only for
  assistant turns after the last real user query; earlier turns lose it, as Qwen3 does;
* ``add_generation_prompt`` opens an assistant turn; with ``enable_thinking=False`` an empty
  ``<think>\\n\\n</think>\\n\\n`` block is pre-filled.

``DEEPSEEK_CHAT_TEMPLATE`` is a deliberately simple template for the DeepSeek vocabulary
without tool support (tool schemas must then be described in the system message).

``TINY_AGENT_CHAT_TEMPLATE`` is the ChatML template of agent_gym's trained tiny agent. It keeps
prompts short for a CPU-sized model: each tool is one line in the system turn,
``name(arg: type, optional?: a|b) - first line of the description``; tool results are
``tool`` turns holding one ``<tool_response>...</tool_response>`` block; assistant
``tool_calls`` (OpenAI format) become ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.
"""

from __future__ import annotations

__all__ = ["DEEPSEEK_CHAT_TEMPLATE", "QWEN_CHAT_TEMPLATE", "TINY_AGENT_CHAT_TEMPLATE"]

# Whitespace control: every Jinja tag uses "-" trimming so only the quoted strings are emitted.
QWEN_CHAT_TEMPLATE = r"""
{%- set ns = namespace(last_query=messages|length - 1, started=false) -%}
{#- Locate the last user message that is a genuine query (not a wrapped tool response). -#}
{%- for m in messages[::-1] -%}
    {%- set i = messages|length - 1 - loop.index0 -%}
    {%- if not ns.started and m.role == 'user' -%}
        {%- set c = m.content if m.content is string else '' -%}
        {%- if not (c.startswith('<tool_response>') and c.endswith('</tool_response>')) -%}
            {%- set ns.last_query = i -%}
            {%- set ns.started = true -%}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if messages and messages[0].role == 'system' and messages[0].content -%}
        {{- messages[0].content + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments '
        'within <tool_call></tool_call> XML tags:\n<tool_call>\n'
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages and messages[0].role == 'system' -%}
    {{- '<|im_start|>system\n' + (messages[0].content or '') + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
    {%- set content = m.content if m.content is string else '' -%}
    {%- if m.role == 'system' -%}
        {%- if not loop.first -%}
            {{- '<|im_start|>system\n' + content + '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif m.role == 'user' -%}
        {{- '<|im_start|>user\n' + content + '<|im_end|>\n' -}}
    {%- elif m.role == 'assistant' -%}
        {%- set reasoning = '' -%}
        {%- if m.reasoning_content is string -%}
            {%- set reasoning = m.reasoning_content -%}
        {%- elif '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- endif -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
            {{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
        {%- else -%}
            {{- content -}}
        {%- endif -%}
        {%- if m.tool_calls -%}
            {%- for call in m.tool_calls -%}
                {%- set fn = call.function if call.function is defined else call -%}
                {%- if not loop.first or content -%}
                    {{- '\n' -}}
                {%- endif -%}
                {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
                {%- if fn.arguments is string -%}
                    {{- fn.arguments -}}
                {%- else -%}
                    {{- fn.arguments | tojson -}}
                {%- endif -%}
                {{- '}\n</tool_call>' -}}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- elif m.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- else -%}
        {{- '<|im_start|>' + m.role + '\n' + content + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if enable_thinking is defined and enable_thinking is false -%}
        {{- '<think>\n\n</think>\n\n' -}}
    {%- endif -%}
{%- endif -%}
"""

DEEPSEEK_CHAT_TEMPLATE = r"""
{{- bos_token -}}
{%- for m in messages -%}
    {%- set content = m.content if m.content is string else '' -%}
    {%- if m.role == 'system' -%}
        {{- content -}}
    {%- elif m.role == 'user' -%}
        {{- '<｜User｜>' + content -}}
    {%- elif m.role == 'assistant' -%}
        {{- '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' -}}
    {%- elif m.role == 'tool' -%}
        {{- '<｜tool▁output▁begin｜>' + content + '<｜tool▁output▁end｜>' -}}
    {%- else -%}
        {{- '<｜User｜>[' + m.role + '] ' + content -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<｜Assistant｜>' -}}
{%- endif -%}
"""

TINY_AGENT_CHAT_TEMPLATE = r"""
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if messages and messages[0].role == 'system' and messages[0].content -%}
        {{- messages[0].content + '\n\n' -}}
    {%- endif -%}
    {{- 'Tools:\n<tools>' -}}
    {%- for tool in tools -%}
        {%- set fn = tool.function if tool.function is defined else tool -%}
        {%- set params = fn.parameters if fn.parameters is defined and fn.parameters else {} -%}
        {%- set props = params.properties if params.properties is defined and params.properties else {} -%}
        {%- set required = params.required if params.required is defined and params.required else [] -%}
        {{- '\n' + fn.name + '(' -}}
        {%- for name, spec in props.items() -%}
            {%- set ns = namespace(kind='') -%}
            {%- for alt in (spec.anyOf if spec.anyOf is defined else [spec]) -%}
                {%- if alt.enum is defined -%}
                    {%- set part = alt.enum | join('|') -%}
                {%- elif alt.type is defined -%}
                    {%- set part = alt.type if alt.type is string else alt.type | join('|') -%}
                {%- else -%}
                    {%- set part = 'any' -%}
                {%- endif -%}
                {%- if part != 'null' -%}
                    {%- set ns.kind = ns.kind + ('|' if ns.kind else '') + part -%}
                {%- endif -%}
            {%- endfor -%}
            {{- (', ' if not loop.first else '') + name + ('' if name in required else '?') + ': ' + ns.kind -}}
        {%- endfor -%}
        {{- ')' -}}
        {%- if fn.description is defined and fn.description -%}
            {{- ' - ' + fn.description.split('\n')[0] -}}
        {%- endif -%}
    {%- endfor -%}
    {{- '\n</tools>\nCall a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>\n' -}}
{%- elif messages and messages[0].role == 'system' -%}
    {{- '<|im_start|>system\n' + (messages[0].content or '') + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
    {%- set content = m.content if m.content is string else '' -%}
    {%- if m.role == 'system' -%}
        {%- if not loop.first -%}
            {{- '<|im_start|>system\n' + content + '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif m.role == 'assistant' -%}
        {{- '<|im_start|>assistant\n' + content -}}
        {%- if m.tool_calls -%}
            {%- for call in m.tool_calls -%}
                {%- set fn = call.function if call.function is defined else call -%}
                {%- if not loop.first or content -%}
                    {{- '\n' -}}
                {%- endif -%}
                {{- '<tool_call>{"name": "' + fn.name + '", "arguments": ' -}}
                {%- if fn.arguments is string -%}
                    {{- fn.arguments -}}
                {%- else -%}
                    {{- fn.arguments | tojson -}}
                {%- endif -%}
                {{- '}</tool_call>' -}}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- elif m.role == 'tool' -%}
        {{- '<|im_start|>tool\n<tool_response>' + content + '</tool_response><|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + m.role + '\n' + content + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""
