"""SGLang's own tool-call parsers as the oracle for Switchboard's (tests/it/tool_call_oracle.rs).

Usage: tool_call_oracle.py CORPUS.json
CORPUS is {"tools": [{"name": ..., "parameters": {schema}}, ...], "cases": {parser: [text, ...]}}.
Prints one JSON line: {"results": {parser: [{"content": str or null, "calls": [[name, arguments], ...]}, ...]}}
where each result is what SGLang 0.5.9's chat server answers for a non-streamed request with
those tools and tool_choice "auto" (OpenAIServingChat._process_tool_calls): a text without a
call is all content; otherwise FunctionCallParser.parse_non_stream, and where that raises, the
whole text with no calls.
"""

import json
import sys
from pathlib import Path

from sglang.srt.entrypoints.openai.protocol import Function, Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser


def main():
    corpus = json.loads(Path(sys.argv[1]).read_text())
    tools = [
        Tool(type="function", function=Function(name=t["name"], parameters=t["parameters"]))
        for t in corpus["tools"]
    ]
    results = {}
    for name, cases in corpus["cases"].items():
        out = []
        for text in cases:
            parser = FunctionCallParser(tools, name)
            content, calls = text, []
            if parser.has_tool_call(text):
                try:
                    content, items = parser.parse_non_stream(text)
                    calls = [[c.name, c.parameters] for c in items]
                except Exception:
                    content, calls = text, []
            out.append({"content": content if content else None, "calls": calls})
        results[name] = out
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
