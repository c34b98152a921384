"""SGLang's own reasoning parsers as the oracle for Switchboard's (tests/it/reasoning_oracle.rs).

Usage: reasoning_oracle.py CORPUS.json
CORPUS is {"parsers": [name, ...], "cases": [{"text": str, "kwargs": dict or null}, ...]}.
Prints one JSON line: {"results": {parser: [{"starts_inside", "whole", "stream"}, ...]}} where
- starts_inside is whether the parser SGLang's chat server makes for the request starts inside
  the reasoning (its force_reasoning from OpenAIServingChat._get_reasoning_from_request, run from
  serving_chat.py's own source, since that module needs torch to import),
- whole is [reasoning, content] from ReasoningParser.parse_non_stream,
- stream is [reasoning, content] joined from ReasoningParser.parse_stream_chunk fed each tag as
  a chunk of its own (as SGLang's server sees a model whose tags are added tokens), plus what
  the parser still holds at the end (SGLang drops it; a gateway must not).
"""

import ast
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import sglang.srt.entrypoints.openai as openai_pkg
from sglang.srt.parser.reasoning_parser import ReasoningParser


def load_get_reasoning_from_request():
    path = Path(openai_pkg.__file__).parent / "serving_chat.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_get_reasoning_from_request":
            node.decorator_list = []
            # Its annotations name the request type, which needs torch to import.
            for arg in node.args.args:
                arg.annotation = None
            node.returns = None
            module = ast.Module(body=[node], type_ignores=[])
            scope = {}
            exec(compile(module, str(path), "exec"), scope)
            return scope["_get_reasoning_from_request"]
    raise SystemExit("FAILED: no _get_reasoning_from_request in " + str(path))


def main():
    corpus = json.loads(Path(sys.argv[1]).read_text())
    get_reasoning = load_get_reasoning_from_request()
    results = {}
    for name in corpus["parsers"]:
        server = SimpleNamespace(reasoning_parser=name)
        out = []
        for case in corpus["cases"]:
            text, kwargs = case["text"], case["kwargs"]
            force = bool(get_reasoning(server, SimpleNamespace(chat_template_kwargs=kwargs)))
            whole = ReasoningParser(name, stream_reasoning=False, force_reasoning=force).parse_non_stream(text)
            parser = ReasoningParser(name, stream_reasoning=True, force_reasoning=force)
            d = parser.detector
            starts_inside = d._in_reasoning
            tags = "(" + re.escape(d.think_start_token) + "|" + re.escape(d.think_end_token) + ")"
            reasoning, content = "", ""
            for chunk in re.split(tags, text):
                if chunk:
                    r, c = parser.parse_stream_chunk(chunk)
                    reasoning += r or ""
                    content += c or ""
            if d._in_reasoning:
                reasoning += d._buffer
            else:
                content += d._buffer
            out.append({"starts_inside": starts_inside, "whole": [whole[0] or "", whole[1] or ""], "stream": [reasoning, content]})
        results[name] = out
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
