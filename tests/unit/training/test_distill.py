"""Distillation end to end on a tiny random verifier: examples, teacher shards, training, the delta, assembly."""

import json

import pytest
import torch
from safetensors.torch import load_file

from asymspec_agents import AsymSpecEngine, ConfigError, ModelLoadError
from asymspec_agents.models import load_model
from asymspec_agents.models.students import StudentSpec, apply_delta, assemble_student, layer_subset
from asymspec_agents.testing import byte_tokenizer, tiny_random_model
from asymspec_agents.training.distill import TrainConfig, build_examples, build_tool_examples, teacher_records, train
from asymspec_agents.training.distill.train import delta_of, load_delta, losses, trainable_student


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tokenizer = byte_tokenizer()
    verifier = tiny_random_model(len(tokenizer), seed=3, layers=3)
    examples = build_examples(8, seed=1, tokenizer=tokenizer, haystack_chars=(300, 700))
    out = tmp_path_factory.mktemp("distill")
    records = teacher_records(verifier, tokenizer, examples, out / "teacher", shard_size=3, max_new_tokens=8,
                              max_prompt_tokens=4096, candidates=16, progress=False)  # bytes are tokens here
    return tokenizer, verifier, examples, records, out


def test_examples_are_deterministic_and_compressed(setup):
    tokenizer, _, examples, _, _ = setup
    again = build_examples(8, seed=1, tokenizer=tokenizer, haystack_chars=(300, 700))
    assert [e.messages[-1].content for e in again] == [e.messages[-1].content for e in examples]
    assert [e.messages[-1].content for e in build_examples(8, 2, tokenizer, haystack_chars=(300, 700))] != \
        [e.messages[-1].content for e in examples]
    assert {e.kind for e in build_examples(40, 1, tokenizer, haystack_chars=(300, 700))} == {"passage", "turns", "plain"}


def test_teacher_records_hold_the_reply_token_and_resume_from_shards(setup):
    tokenizer, verifier, examples, records, out = setup
    assert len(records) == len(examples) and len(list((out / "teacher").glob("teacher-*.pt"))) == 3
    for r in records:
        assert len(r.comp) < len(r.full) and r.candidates.shape == (len(r.reply), 16)
        assert (r.candidates[:, 0] == torch.tensor(r.reply)).all()  # the reply's own token is always a candidate
        assert (r.lp_full <= 0).all() and (r.lp_comp <= 0).all()
    again = teacher_records(verifier, tokenizer, examples, out / "teacher", shard_size=3, progress=False)
    assert [r.reply for r in again] == [r.reply for r in records]  # loaded, not recomputed with other settings


def test_teacher_shards_made_from_other_examples_are_refused(setup):
    tokenizer, verifier, examples, _, out = setup
    others = build_examples(8, seed=2, tokenizer=tokenizer, haystack_chars=(300, 700))
    with pytest.raises(ConfigError, match="made from other examples.*--teacher-cache"):
        teacher_records(verifier, tokenizer, others, out / "teacher", shard_size=3, progress=False)


def test_teacher_shards_made_by_another_teacher_are_refused(setup):
    tokenizer, _, examples, _, out = setup  # the same examples; the teacher's weights retrained since
    retrained = tiny_random_model(len(tokenizer), seed=4, layers=3)
    with pytest.raises(ConfigError, match="another teacher.*retrained since"):
        teacher_records(retrained, tokenizer, examples, out / "teacher", shard_size=3, progress=False)


def test_tool_examples_are_agent_transcripts_whose_replies_follow_the_tool_grammar(setup, tmp_path):
    tokenizer, verifier, _, _, _ = setup
    small = dict(haystack_chars=(300, 700), tools_per_example=2)  # a byte tokenizer makes long prompts
    examples = build_tool_examples(6, seed=2, tokenizer=tokenizer, **small)
    assert [e.messages[-1].content for e in build_tool_examples(6, 2, tokenizer, **small)] == \
        [e.messages[-1].content for e in examples]
    assert {e.kind for e in build_tool_examples(30, 2, tokenizer, haystack_chars=(300, 700))} == {"tool_call",
                                                                                                   "tool_result"}
    from asymspec_agents.stdlib_text import documented_functions

    benchmark_tools = {name for name, _, _ in documented_functions()}
    for e in examples:
        assert e.tools and e.tool_choice in ("required", "none")
        assert not benchmark_tools & {t.name for t in e.tools}  # no tool of the tools task is trained on
        if e.kind == "tool_result":
            assert e.answer in e.messages[3].content and e.messages[2].tool_calls
    records = teacher_records(verifier, tokenizer, examples, tmp_path, shard_size=4, candidates=16, progress=False,
                              max_prompt_tokens=6000)
    assert [r.kind for r in records] == [e.kind for e in examples]
    for r in records:
        assert len(r.comp) < len(r.full) and r.candidates.shape == (len(r.reply), 16)
        text = tokenizer.decode(r.reply)
        if r.kind == "tool_call":  # a random model under tool_choice="required" still writes a call
            assert text.startswith("<tool_call>")
        else:
            assert "<tool_call>" not in text


def test_training_lowers_the_losses_and_the_delta_assembles_to_the_trained_student(setup, tmp_path):
    _, verifier, _, records, _ = setup
    spec = StudentSpec(trunk=1, top=(2,), rank=4, alpha=8.0, extra={"verifier": "tiny"})
    before = trainable_student(verifier, spec)
    config = TrainConfig(epochs=3, lr=1e-2, accumulate=2)
    with torch.no_grad():
        start = sum(float(losses(before, r, config.weights, config.context_weight)["total"]) for r in records)
    history = train(verifier, spec, records, records[:3], tmp_path, config, progress=False)
    assert history["steps"] and len(history["dev"]) == 4
    trained = trainable_student(verifier, spec)
    trained.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=False)["student"], strict=False)
    with torch.no_grad():
        end = sum(float(losses(trained, r, config.weights, config.context_weight)["total"]) for r in records)
    assert end < 0.8 * start
    assembled = assemble_student(verifier, tmp_path)
    ids = torch.tensor([records[0].full[:40]])
    with torch.no_grad():
        torch.testing.assert_close(assembled(ids).logits, trained(ids).logits, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(assembled(ids).logits, layer_subset(verifier, spec.layers)(ids).logits)
    # the trunk and the verifier are untouched
    assert torch.equal(assembled.model.layers[0].mlp.down_proj.weight, verifier.model.layers[0].mlp.down_proj.weight)
    assert json.loads((tmp_path / "student.json").read_text())["top"] == [2]
    # resuming a finished run trains nothing more and writes the same delta
    again = train(verifier, spec, records, records[:3], tmp_path, config, progress=False)
    assert again["dev"] == history["dev"]


def test_training_can_start_from_a_saved_delta_and_refuses_one_of_another_shape(setup, tmp_path):
    _, verifier, _, records, _ = setup
    spec = StudentSpec(trunk=1, top=(2,), rank=4, alpha=8.0)
    train(verifier, spec, records[:4], records[:2], tmp_path / "first", TrainConfig(epochs=1, lr=1e-2),
          progress=False)
    saved = load_file(str(tmp_path / "first" / "delta.safetensors"))
    resumed = trainable_student(verifier, spec)
    load_delta(resumed, saved)
    assert delta_of(resumed, spec).keys() == saved.keys()
    assert all(torch.equal(delta_of(resumed, spec)[name], tensor) for name, tensor in saved.items())
    # a run started from it begins where the first one ended: its epoch-0 score is the first run's last
    history = train(verifier, spec, records[:4], records[:2], tmp_path / "second", TrainConfig(epochs=1, lr=1e-2),
                    start=saved, progress=False)
    first = json.loads(json.dumps(torch.load(tmp_path / "first" / "checkpoint.pt", weights_only=False)["history"]))
    assert history["dev"][0]["top1_agreement"] == first["dev"][-1]["top1_agreement"]
    with pytest.raises(ConfigError, match="same --trunk, --top and --rank"):
        load_delta(trainable_student(verifier, StudentSpec(trunk=1, top=(2,), rank=8)), saved)


def test_whole_matrix_training_and_the_assembled_student_drafts_in_the_engine(setup, tmp_path):
    tokenizer, verifier, _, records, _ = setup
    spec = StudentSpec(trunk=1, top=(1,), rank=0)
    train(verifier, spec, records[:4], records[:2], tmp_path, TrainConfig(epochs=1, lr=1e-3), progress=False)
    student = assemble_student(verifier, tmp_path)
    result = AsymSpecEngine(verifier, student, tokenizer).generate(records[0].full, records[0].comp, max_new_tokens=8)
    assert result.stats.drafted > 0 and student.config.num_hidden_layers == 2


def test_bad_specs_and_folders_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="at least one layer"):
        StudentSpec(trunk=0, top=())
    with pytest.raises(ConfigError, match="layer indices"):
        layer_subset(tiny_random_model(259, layers=2), [0, 5])
    with pytest.raises(ModelLoadError, match="student.json"):
        assemble_student(tiny_random_model(259), tmp_path)
    student = layer_subset(tiny_random_model(259, layers=2), [0, 1])
    with pytest.raises(ModelLoadError, match="does not have"):
        apply_delta(student, {"model.layers.9.input_layernorm.weight": torch.ones(64)}, StudentSpec(rank=0))
    (tmp_path / "student.json").write_text(StudentSpec().to_json())
    (tmp_path / "delta.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="does not name the verifier"):
        load_model(tmp_path)
