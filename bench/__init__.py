"""systolica.bench"""
