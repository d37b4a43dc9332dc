"""Document rewards: counting (``counting``), OCR's 1 - CER / 1 - WER and DocVQA's ANLS
(``ocr``). Imports only the contract, the shared geometry and this folder.
"""
