"""`asymspec distill-drafter`: a cheaper drafter distilled from the verifier's own layers (docs/design.md §8).

    asymspec distill-drafter --verifier bundled --out runs/small   # the shipped bundled-small's recipe

1. build chat prompts from the standard library's docstrings (`examples.py`), each with a compressed view
   (`--tool-examples N` adds agent transcripts: tool calls and answers from long tool outputs);
2. let the verifier answer them and record its log-probabilities on both views (`teacher.py`, resumable shards);
3. train the student's top layers on the three losses of `train.py` (checkpoint per epoch, resumable);
4. score it (teacher-forced agreement, acceptance inside the engine under both rules) and write
   `student.json`, `delta.safetensors`, `report.json`, `report.md` and `loss.png` into the output folder.

The output folder is a drafter name: `AsymSpecEngine.from_pretrained("bundled", "runs/small")`, `load_model("runs/small")`
(assembled once from the verifier named in student.json, then cached); the shipped `bundled-small` is such a folder.
"""

from .examples import Example, build_examples, build_tool_examples, stdlib_paragraphs
from .teacher import TeacherRecord, teacher_records
from .train import TrainConfig, evaluate, train, trainable_student

__all__ = ["Example", "TeacherRecord", "TrainConfig", "build_examples", "build_tool_examples", "evaluate",
           "stdlib_paragraphs", "teacher_records", "train", "trainable_student"]
