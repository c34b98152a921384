# Sourced by the benchmarks that put SMG in front of gRPC sims.
#
# smg_model_dir DIR: a model folder as a real worker has one, the SmolLM2 tokenizer files and a
# config.json, made in DIR; prints DIR. A gRPC worker reports its tokenizer folder
# (GetModelInfo's tokenizer_path) and SMG reads the model's multimodal config from it; without a
# config.json SMG looks the model up on the Hugging Face Hub, which this machine cannot reach,
# and each such lookup stalls a request for 5 s.
smg_model_dir() {
    local dir=$1 root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    mkdir -p "$dir"
    cp "$root"/assets/tokenizers/smollm2-135m-instruct/* "$dir"/
    echo '{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}' >"$dir/config.json"
    echo "$dir"
}
