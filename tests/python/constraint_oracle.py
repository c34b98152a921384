"""SGLang's own chat route as the oracle for the constraints Switchboard puts on a generation
(tests/it/tool_call_constraints.rs, tests/it/openai_native.rs).

Usage: constraint_oracle.py PARSER REQUESTS_JSON
PARSER is a --tool-call-parser name or "" for none; REQUESTS_JSON a list of chat request
bodies. Prints one JSON line: {"results": [{"json_schema": str or null, "structural_tag": ...,
"regex": ..., "ebnf": ...}, ...]}: the constraint fields of the sampling parameters SGLang
0.5.9's OpenAIServingChat sends to its engine for each request (`_process_messages`' tool-call
constraint, then `ChatCompletionRequest.to_sampling_params`).
"""

import json
import sys

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, ToolChoice
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.function_call.utils import get_json_schema_constraint


def tool_call_constraint(request, parser_name):
    # OpenAIServingChat._process_messages, the part that picks the constraint.
    constraint = None
    if request.tools and request.tool_choice != "none":
        if parser_name:
            parser = FunctionCallParser(request.tools, parser_name)
            constraint = parser.get_structure_constraint(request.tool_choice)
        if request.tool_choice == "required" or isinstance(request.tool_choice, ToolChoice):
            constraint = ("json_schema", get_json_schema_constraint(request.tools, request.tool_choice))
    return constraint


def main():
    parser_name = sys.argv[1]
    results = []
    for body in json.loads(sys.argv[2]):
        request = ChatCompletionRequest(**body)
        params = request.to_sampling_params(
            stop=[],
            model_generation_config={},
            tool_call_constraint=tool_call_constraint(request, parser_name),
        )
        results.append({k: params.get(k) for k in ["json_schema", "structural_tag", "regex", "ebnf"]})
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
