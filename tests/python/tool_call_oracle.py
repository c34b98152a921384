"""SGLang's own tool-call parsers as the oracle for Switchboard's (tests/it/tool_call_oracle.rs).

Usage: tool_call_oracle.py CORPUS.json
CORPUS is {"tools": [{"name": ..., "parameters": {schema}}, ...], "cases": {parser: [text, ...]},
"reasoning": {parser: reasoning_parser}}.
Prints one JSON line: {"results": {parser: [{"content": str or null, "calls": [[name, arguments], ...]}, ...]},
"with_reasoning": {parser: [{"reasoning": str, "content": ..., "calls": ...}, ...]}}
where each result is what SGLang 0.5.9's chat server answers for a non-streamed request with
those tools and tool_choice "auto" (OpenAIServingChat._process_tool_calls): a text without a
call is all content; otherwise FunctionCallParser.parse_non_stream, and where that raises, the
whole text with no calls. "with_reasoning" is the same server with the paired reasoning parser
on too: ReasoningParser.parse_non_stream first, its content then read for calls.
"""

import json
import sys
from pathlib import Path

from sglang.srt.entrypoints.openai.protocol import Function, Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser


def read_calls(tools, name, text):
    parser = FunctionCallParser(tools, name)
    content, calls = text, []
    if parser.has_tool_call(text):
        try:
            content, items = parser.parse_non_stream(text)
            calls = [[c.name, c.parameters] for c in items]
        except Exception:
            content, calls = text, []
    return {"content": content if content else None, "calls": calls}


def main():
    corpus = json.loads(Path(sys.argv[1]).read_text())
    tools = [
        Tool(type="function", function=Function(name=t["name"], parameters=t["parameters"]))
        for t in corpus["tools"]
    ]
    results, with_reasoning = {}, {}
    for name, cases in corpus["cases"].items():
        results[name] = [read_calls(tools, name, text) for text in cases]
        reasoning_parser = corpus.get("reasoning", {}).get(name)
        if reasoning_parser:
            out = []
            for text in cases:
                # As the chat server: force_reasoning is on for gpt-oss whatever the request.
                reasoning, content = ReasoningParser(reasoning_parser, stream_reasoning=False, force_reasoning=True).parse_non_stream(text)
                out.append({"reasoning": reasoning or "", **read_calls(tools, name, content or "")})
            with_reasoning[name] = out
    print(json.dumps({"results": results, "with_reasoning": with_reasoning}))


if __name__ == "__main__":
    main()
