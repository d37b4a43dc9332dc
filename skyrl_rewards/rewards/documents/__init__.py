"""Document rewards: counting (``counting``), OCR's 1 - CER / 1 - WER and DocVQA's ANLS
(``ocr``), ChartQA's relaxed accuracy (``relaxed_accuracy``) and VQAv2's accuracy
(``vqa_accuracy``). Imports only the contract, the shared geometry and this folder.
"""
