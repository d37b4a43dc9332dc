"""Box rewards: REC IoU (``rec``), detection (``detection``), COCO mAP (``coco_map``),
GIoU and IoU² (``giou``) and Hungarian matching of many boxes (``box_matching``), each with
its component. Imports only the contract, the shared geometry and this folder.
"""
