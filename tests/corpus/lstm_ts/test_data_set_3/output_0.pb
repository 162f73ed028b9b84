BscoresJo­m=ž)è<®€—=9ï
½<gD>