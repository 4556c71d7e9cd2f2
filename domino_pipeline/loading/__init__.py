"""The loading side: datasets and the hand-over of batches from DataLoader workers."""
