"""Rows for the vision rewards beyond VLM-R1: one task per reward, four answers per task.

Shared by the pool and TRL tests. Images are the bundled sample images (paths absolute);
ground truths are in original pixels, answers in each reward's default box format.
"""

from __future__ import annotations

from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "skyrl_rewards" / "sample_data"
REC_IMAGE = str(SAMPLE / "images" / "rec_000.png")  # 200x150; Qwen2.5-VL sees 196x140
DET_IMAGE = str(SAMPLE / "images" / "det_000.png")

_SHAPES = (
    '```json\n[{"bbox_2d": [125, 95, 195, 133], "label": "triangle"}, '
    '{"bbox_2d": [102, 20, 167, 57], "label": "square"}]\n```'
)

TASKS: dict[str, dict] = {
    # reward name -> the row's columns and the four answers of its group
    "giou": {
        "columns": {"image_path": REC_IMAGE, "solution": "<answer>[22, 59, 92, 104]</answer>"},
        "answers": ["[22, 55, 90, 97]", "[30, 62, 98, 104]", "[150, 10, 190, 40]", "no box"],
    },
    "boxes_matched": {
        "columns": {"image_path": DET_IMAGE, "solution": f"<answer>{_SHAPES}</answer>"},
        "answers": [
            _SHAPES,
            '[{"bbox_2d": [125, 95, 195, 133], "label": "triangle"}]',
            '[{"bbox_2d": [125, 95, 195, 133], "label": "square"}]',  # wrong label
            "a triangle and a square",
        ],
    },
    "gui_action": {
        "columns": {
            "image_path": REC_IMAGE,
            "solution": '{"action": "click", "bbox": [22, 59, 92, 104]}',
        },
        "answers": ["click(56, 76)", "click(150, 70)", 'type("sign in")', "the blue button"],
    },
    "gui_point": {
        "columns": {"image_path": REC_IMAGE, "solution": "[93, 54, 152, 100]"},
        "answers": ["[91, 53, 149, 98]", "[100, 52, 160, 90]", "[20, 55, 90, 97]", "none"],
    },
    "count": {
        "columns": {"solution": "<answer>7</answer>"},
        "answers": ["7", "There are seven.", "6", "many"],
    },
    "ocr": {
        "columns": {"solution": "<answer>Total: 42 items shipped on 03/04</answer>"},
        "answers": [
            "Total: 42 items shipped on 03/04",
            "Tota1: 42 itens shipped on 03/04",
            "42 items",
            "",
        ],
    },
    "anls": {
        "columns": {"solution": '<answer>["12/15/88", "December 15, 1988"]</answer>'},
        "answers": ["12/15/88", "December 15 1988", "12/16/89", "Denver"],
    },
    "relaxed_accuracy": {
        "columns": {"solution": "<answer>37.5</answer>"},
        "answers": ["37.5", "38", "42", "about a third"],
    },
    "vqa_accuracy": {
        "columns": {
            "solution": '<answer>["red", "red", "red", "dark red", "red", "red", "maroon", '
            '"red", "red", "dark red"]</answer>'
        },
        "answers": ["Red.", "dark red", "maroon", "blue"],
    },
}


def completion(answer: str) -> str:
    """The answer in VLM-R1's think/answer layout."""
    return f"<think>I look.</think> <answer>{answer}</answer>"
