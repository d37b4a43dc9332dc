"""The reward functions: pure Python over model text and dataset fields.

No Ray, no skyrl-gym: this layer is what a TRL script, a math child process
or a pool worker imports. Folders by family, each reward's component beside
the function it wraps: ``text`` (math, choice, shaping, format), ``boxes``
(IoU, detection, COCO mAP, GIoU, matching), ``gui``, ``documents`` (count,
OCR, ANLS) and ``models`` (judge, reward model); below them the shared
``geometry`` (boxes and box formats) and the ``contract`` (component base,
result, lane types, text extraction, masking). A family imports only the
contract, the geometry and its own folder. At the top: ``accuracy`` (VLM-R1's
accuracy, dispatched per row across the families), ``registry`` (the table of
named components), ``mix`` (weighted components) and ``batch`` (TRL's batch
convention).
"""
